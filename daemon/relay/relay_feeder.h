#ifndef WSYNC_DAEMON_RELAY_RELAY_FEEDER_H_
#define WSYNC_DAEMON_RELAY_RELAY_FEEDER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/daemon_core.h"
#include "daemon/relay/resident_version.h"

namespace grpc {
class ClientContext;
}

namespace wsync {

class LocalUpdate;  // relay_feeder.cc: a local update run as an in-process trainer

// Where a downstream wsyncd's local group is fed from: an upstream wsyncd's relay group.
struct RelayFeedOptions {
  std::string upstream;     // the upstream's --listen address, "host:port"
  std::string group;        // its relay group, which names this node as wsyncd://<node>
  std::string local_group;  // the group here it feeds; "" means the same name as `group`
  std::string node;         // this node's name in the upstream's group; "" means the host name
  std::string token_file;   // a relay token of the upstream naming `group`
  std::string ca_file;      // PEM the upstream's certificate chains to
  std::string server_name;  // the name the certificate holds, where it is not the address's host
  absl::Duration retry = absl::Seconds(2);  // between a subscription's end and the next attempt
};

// Checks what a feed needs before any connection: upstream, group, token and CA file.
absl::Status ValidateRelayFeed(const RelayFeedOptions& options);
// Sets one of a feed's settings by its name (upstream, group, local_group, node, token_file,
// ca_file, server_name): the keys of a config file's relay_feeds entries and of --relay-feed.
absl::Status SetRelayFeedKey(const std::string& key, const std::string& value,
                             RelayFeedOptions* options);
// "upstream=HOST:PORT,group=G,token_file=F,ca_file=C[,local_group=L][,node=N][,server_name=S]".
absl::StatusOr<RelayFeedOptions> ParseRelayFeedFlag(const std::string& text);

// A downstream's side of one relay feed (docs/RELAY.md): it holds the subscription (gRPC over
// TLS with a relay token) and, per update, acts as an in-process trainer of its local group:
// OpenSession on the device the group is fed from, BeginUpdate, each bucket received into a free
// slot of that session from its pair with the upstream and submitted with the upstream's CRC-32
// (the local update verifies it against the bytes that landed), then Commit or Abort as the
// upstream says. When the subscription ends (the upstream went away) the open update is aborted,
// so the engines resume on their last whole version, and the feeder subscribes again.
class RelayFeeder {
 public:
  // What `wsyncctl relay` shows of a feed.
  struct View {
    RelayFeedOptions options;
    bool subscribed = false;
    std::string subscriber_id;  // the upstream's id for this subscription
    std::string last_version;   // the last version its local group committed
    absl::Time last_commit = absl::InfinitePast();
    std::string last_error;  // why the last subscription or update failed; "" after a commit
    uint64_t updates_committed = 0;
  };

  // `resident`: whether and how the last version received whole is kept for engines that
  // restart or a local group created later (ResidentVersion).
  RelayFeeder(DaemonCore* core, RelayFeedOptions options, ResidentOptions resident = {});
  ~RelayFeeder();
  void Start();
  // Ends the subscription (an open update is aborted, a receive or replay in progress returns)
  // and the threads.
  void Stop();
  View Status() const;
  // The resident version's state; nullopt where none is kept (--resident none).
  std::optional<ResidentVersion::View> ResidentStatus() const;

 private:
  class Subscription;
  void Run();
  // Brings the local group to the resident version where an engine of it does not hold it (it
  // restarted, or the group is new), with no trainer: a local update from the kept buckets,
  // fenced as any update (whole or not at all, the version label set).
  void ReplayLoop();
  absl::Status Replay(const ResidentVersion::Kept& kept, int device);
  // A relayed update and a replay never run at once: each takes the local group in turn.
  // `preempt_replay`: a replay in progress is interrupted (a relayed update brings a newer
  // version than the resident one).
  absl::Status AcquireUpdate(absl::Time deadline, bool preempt_replay);
  void ReleaseUpdate();
  // The resident store on `device`, made at its first use; null with --resident none.
  ResidentVersion* ResidentFor(int device);
  void NoteCommit(const std::string& version, const absl::Status& status);

  DaemonCore* const core_;
  const RelayFeedOptions options_;
  const ResidentOptions resident_options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  grpc::ClientContext* context_ = nullptr;  // the subscription's, while one runs
  Subscription* subscription_ = nullptr;    // while one is served
  bool update_held_ = false;                // a relayed update or a replay holds the group
  View view_;
  std::unique_ptr<ResidentVersion> resident_;  // guarded by mu_ (made once)
  int resident_device_ = -1;
  // When the last replay of a version failed or left an engine without it: not tried again for
  // a while, so an engine that cannot take it is not fed it in a loop.
  std::string replayed_version_;
  absl::Time replay_again_at_ = absl::InfinitePast();
  absl::Duration replay_backoff_ = absl::Minutes(1);
  std::shared_ptr<LocalUpdate> replay_update_;  // the replay's, while one runs
  std::thread thread_;
  std::thread replay_thread_;
};

// The feeds of one wsyncd, for the server that lists them.
class RelayFeeders {
 public:
  ~RelayFeeders() { Stop(); }
  void Start(DaemonCore* core, const std::vector<RelayFeedOptions>& feeds,
             const ResidentOptions& resident);
  void Stop();
  std::vector<RelayFeeder::View> Views() const;
  // Each feed's resident version, where one is kept.
  std::vector<std::pair<RelayFeedOptions, ResidentVersion::View>> Residents() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<RelayFeeder>> feeders_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RELAY_FEEDER_H_
