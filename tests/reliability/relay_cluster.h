#ifndef WSYNC_TESTS_RELIABILITY_RELAY_CLUSTER_H_
#define WSYNC_TESTS_RELIABILITY_RELAY_CLUSTER_H_

// A node relay on loopback, as the fault matrix drives it: an upstream host-mode wsyncd (TLS,
// relay group "policy" whose members are the downstream nodes) and downstream wsyncds node-b,
// node-c, ..., each subscribed with a relay token and feeding its local group "policy" (one
// SGLang simulator of one rank) from its own slots. Processes are driven through the C++ client,
// the admin API on each daemon's unix socket, the simulators' HTTP state, and signals.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process_harness.h"
#include "tests/reliability/tls_files.h"
#include "tests/service/service_fixture.h"

namespace wsync {

struct RelayClusterOptions {
  std::string wsyncd_bin;
  std::string dir;  // sockets, configs, TLS files and every process's log
  int downstreams = 2;
  int quorum = 0;  // the relay group's quorum; 0: every member
  int bucket_timeout_s = 2;
  // Each engine's flags (e.g. --answer-delay-ms 40, so that an update lasts long enough to cut).
  std::vector<std::string> engine_flags;
};

class RelayCluster {
 public:
  explicit RelayCluster(RelayClusterOptions options);
  ~RelayCluster();
  RelayCluster(const RelayCluster&) = delete;

  // TLS files, the upstream, every engine and downstream; returns once every node subscribed.
  absl::Status Start();

  // The upstream on its port (the same one after a restart), and its end by `sig`.
  absl::Status StartUpstream();
  void KillUpstream(int sig);
  int upstream_pid() const { return upstream_->pid(); }
  bool UpstreamUp();
  std::string UpstreamLog() const { return upstream_ ? upstream_->Log() : ""; }

  // Downstream i (node-b is 0): its wsyncd, and its end by `sig` (its engine lives on).
  absl::Status StartDownstream(int i);
  void KillDownstream(int i, int sig);
  int downstream_pid(int i) const { return downstreams_[i]->pid(); }
  bool DownstreamUp(int i);
  std::string DownstreamLog(int i) const;
  static std::string Node(int i) { return std::string("node-") + static_cast<char>('b' + i); }
  // Until the upstream lists downstream i among its subscribers, under another id than `not_id`
  // (a subscription made after the one a fault ended).
  absl::Status WaitSubscribed(int i, const std::string& not_id = "",
                              absl::Duration timeout = absl::Seconds(20));
  // Downstream i's subscription id at the upstream ("" none).
  std::string SubscriberId(int i);
  // Downstream i's local group's state (GROUP_STATE_*).
  absl::StatusOr<v1::GroupState> DownstreamGroupState(int i);

  // A trainer's client on the upstream's socket.
  absl::StatusOr<std::unique_ptr<Client>> Connect();

  // Engine i's GET /sim/checksums.
  absl::StatusOr<nlohmann::json> EngineState(int i);
  // Engine i's count of update requests so far.
  absl::StatusOr<int> EngineUpdates(int i);
  // Engine i holds `model` byte for byte under `version`, and serves it (not paused).
  absl::Status EngineHolds(int i, const std::vector<OwnedTensor>& model,
                           const std::string& version);
  // Engine i serves no mix: it waits paused, or every rank holds one of `models` whole.
  absl::Status EngineServesNoMix(int i, const std::vector<std::vector<OwnedTensor>>& models);
  // Pushes `model` as `version` until every member commits (a member back from a fault joins
  // the group at the update after its subscription), then checks every engine holds it.
  absl::Status PushUntilAllCommit(Client& client, const std::string& version,
                                  const std::vector<OwnedTensor>& model,
                                  absl::Duration timeout = absl::Seconds(30));

 private:
  std::string Path(const std::string& name) const { return options_.dir + "/" + name; }
  absl::StatusOr<v1::RelayStatus> UpstreamRelay();

  RelayClusterOptions options_;
  TlsFiles tls_;
  int upstream_port_ = 0;
  std::unique_ptr<ChildProcess> upstream_;
  std::vector<int> engine_ports_;
  std::vector<std::unique_ptr<ChildProcess>> engines_;
  std::vector<std::unique_ptr<ChildProcess>> downstreams_;
  int starts_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_RELAY_CLUSTER_H_
