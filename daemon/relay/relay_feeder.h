#ifndef WSYNC_DAEMON_RELAY_RELAY_FEEDER_H_
#define WSYNC_DAEMON_RELAY_RELAY_FEEDER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/daemon_core.h"

namespace grpc {
class ClientContext;
}

namespace wsync {

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

  RelayFeeder(DaemonCore* core, RelayFeedOptions options);
  ~RelayFeeder();
  void Start();
  // Ends the subscription (an open update is aborted) and the thread.
  void Stop();
  View Status() const;

 private:
  class Subscription;
  void Run();

  DaemonCore* const core_;
  const RelayFeedOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  grpc::ClientContext* context_ = nullptr;  // the subscription's, while one runs
  View view_;
  std::thread thread_;
};

// The feeds of one wsyncd, for the server that lists them.
class RelayFeeders {
 public:
  ~RelayFeeders() { Stop(); }
  void Start(DaemonCore* core, const std::vector<RelayFeedOptions>& feeds);
  void Stop();
  std::vector<RelayFeeder::View> Views() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<RelayFeeder>> feeders_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RELAY_FEEDER_H_
