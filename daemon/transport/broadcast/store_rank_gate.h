#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_RANK_GATE_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_RANK_GATE_H_

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/net.h"
#include "daemon/transport/engine_process.h"

namespace wsync {

// Which processes on this host may connect to a group's store, for a layout whose keys name no
// group (vLLM's StatelessProcessGroup: every rank reads "/broadcast_from/0/0"), where nothing a
// client sends tells a rank from any other local process. A connection from one of this host's
// addresses is let in only when its socket was made by a process that
//   - runs as the user of a local engine of the group (the owner of its listening socket), and
//   - is, or descends from, a process serving that engine's port, where wsyncd sees those
//     (vLLM's workers are children of its EngineCore, itself a child of the API server).
// A connection from another host is judged by its address alone (TcpStoreServer's allowed peers):
// wsyncd cannot see that host's processes.
class StoreRankGate {
 public:
  // `local_ips` are this host's addresses (a connection from one is local); `local_engines` the
  // URLs of the group's engines on this host; `proc` is procfs's mount point.
  StoreRankGate(std::set<std::string> local_ips, std::vector<std::string> local_engines,
                std::string proc = "/proc")
      : local_ips_(std::move(local_ips)),
        local_engines_(std::move(local_engines)),
        proc_(std::move(proc)) {}

  // Finds the local engines' processes again: before each formation, since an engine may have
  // restarted with other pids. An engine not found is remembered with why, for the refusals.
  void Refresh();

  // OK admits; otherwise PermissionDenied saying who connected and why it is not an engine rank.
  // Reads /proc: the socket's row, and the descriptors of the engines' process trees only.
  absl::Status Admit(const SocketEnds& ends) const;

 private:
  struct LocalEngine {
    std::string url;
    absl::StatusOr<EngineProcess> process;
  };

  const std::set<std::string> local_ips_;
  const std::vector<std::string> local_engines_;
  const std::string proc_;
  EngineProcessFinder finder_{proc_};
  mutable std::mutex mu_;
  std::vector<LocalEngine> found_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_RANK_GATE_H_
