#ifndef WSYNC_TESTS_RELIABILITY_REAL_CLUSTER_H_
#define WSYNC_TESTS_RELIABILITY_REAL_CLUSTER_H_

// A real host-mode wsyncd process and two SGLang simulator processes (engine 0 with one TP rank,
// engine 1 with two) on loopback, joined in one group "policy", as the soak and the fault matrix
// drive them: through the C++ client over wsyncd's unix socket, the simulators' HTTP knobs, and
// signals.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/client.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process_harness.h"
#include "tests/service/service_fixture.h"

namespace wsync {

struct ClusterOptions {
  std::string wsyncd_bin;
  // Scratch directory: the socket and every process's log.
  std::string dir;
  // Seconds a bucket may take: how long a hung engine holds an update.
  int bucket_timeout_s = 3;
  // Seconds an engine control call may take (health probes: at most 5).
  int control_timeout_s = 5;
  std::vector<std::string> extra_flags;
};

class RealCluster {
 public:
  static constexpr int kEngines = 2;

  explicit RealCluster(ClusterOptions options);
  ~RealCluster();
  RealCluster(const RealCluster&) = delete;

  // Starts both engines and wsyncd, and creates the group.
  absl::Status Start();
  // Kills wsyncd with `sig`, starts it again the same way (no --state-dir: its state directory is
  // the default, $XDG_STATE_HOME/wsync, with XDG_STATE_HOME in dir()) and creates the group as
  // Start did, as a trainer that starts again does.
  absl::Status RestartDaemon(int sig);
  // wsyncd's $XDG_STATE_HOME: each cluster's own, so clusters side by side never share a state
  // directory (one wsyncd per directory) nor touch the user's.
  std::string state_home() const { return options_.dir + "/xdg-state"; }

  // Engine i: (re)starts it at its port, or stops it with `sig`.
  absl::Status StartEngine(int i);
  void StopEngine(int i, int sig);
  std::string engine_url(int i) const;
  int engine_ranks(int i) const { return i == 0 ? 1 : 2; }
  // POST /sim/knobs; returns the engine's count of update requests so far.
  absl::StatusOr<int> SetKnobs(int i, const nlohmann::json& knobs);

  ChildProcess& daemon() { return *daemon_; }
  int daemon_pid() const { return daemon_->pid(); }
  // Running and answering the admin API.
  bool DaemonUp();
  std::string DaemonLog() const { return daemon_->Log(); }
  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return options_.dir; }

  absl::StatusOr<std::unique_ptr<Client>> Connect();
  // The admin client (this process runs as wsyncd's user, so it is an admin).
  Client& admin() { return *admin_; }
  absl::StatusOr<v1::GroupInfo> Group();
  absl::StatusOr<std::vector<v1::UpdateRecord>> Updates();

  // Engine i's GET /sim/checksums: what each rank holds, and its state.
  absl::StatusOr<nlohmann::json> EngineState(int i);
  // Whether engine i is paused (its generation stopped), as it reports itself.
  absl::StatusOr<bool> EnginePaused(int i);
  // Checks what an update that did not commit must leave: every engine paused, and wsyncd saying
  // of each that it waits for a full version (both engines get every bucket of a broadcast).
  absl::Status EnginesHeldBack();
  // Every rank of every engine holds `model` byte for byte under `version`, and serves it (not
  // paused).
  absl::Status EnginesHold(const std::vector<OwnedTensor>& model, const std::string& version);
  // Pushes `model` as `version` through `client` and checks the engines hold it.
  absl::Status PushAndVerify(Client& client, const std::string& version,
                             const std::vector<OwnedTensor>& model);

 private:
  absl::Status StartDaemon();
  absl::Status CreateGroup();

  ClusterOptions options_;
  std::string socket_;
  int ports_[kEngines] = {0, 0};
  std::unique_ptr<ChildProcess> engines_[kEngines];
  std::unique_ptr<ChildProcess> daemon_;
  std::unique_ptr<Client> admin_;
  int engine_starts_ = 0;
  int daemon_starts_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_REAL_CLUSTER_H_
