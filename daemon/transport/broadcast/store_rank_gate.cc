#include "daemon/transport/broadcast/store_rank_gate.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace wsync {

void StoreRankGate::Refresh() {
  std::vector<LocalEngine> found;
  for (const std::string& url : local_engines_) found.push_back({url, finder_.Find(url)});
  std::lock_guard<std::mutex> lock(mu_);
  found_ = std::move(found);
}

absl::Status StoreRankGate::Admit(const SocketEnds& ends) const {
  const bool local = local_ips_.count(ends.peer_ip) != 0 || absl::StartsWith(ends.peer_ip, "127.");
  if (!local) return absl::OkStatus();
  const std::string who = absl::StrCat(ends.peer_ip, ":", ends.peer_port);
  auto row = FindTcpSocket(ends.peer_ip, ends.peer_port, ends.local_ip, ends.local_port, proc_);
  if (!row.ok() || row->inode == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("a connection from ", who, " is no engine rank: ",
                     row.ok() ? "no process holds its socket any more" : row.status().message()));
  }
  std::vector<std::string> why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const LocalEngine& engine : found_) {
      if (!engine.process.ok()) {
        why.push_back(std::string(engine.process.status().message()));
        continue;
      }
      const EngineProcess& process = *engine.process;
      if (row->uid != process.uid) {
        why.push_back(absl::StrCat("engine ", engine.url, " runs as uid ", process.uid));
        continue;
      }
      // Where wsyncd sees no server process (another user's, or another PID namespace's), the
      // user is all it can check.
      if (process.servers.empty()) return absl::OkStatus();
      for (pid_t pid : ProcessTree(process.servers, proc_)) {
        if (HoldsSocket(pid, row->inode, proc_)) return absl::OkStatus();
      }
      why.push_back(absl::StrCat("engine ", engine.url, " (", process.Describe(),
                                 "): neither its server nor a descendant holds the socket"));
    }
  }
  if (why.empty()) why.push_back("the group has no engine on this host");
  return absl::PermissionDeniedError(absl::StrCat(
      "a connection from ", who, " (uid ", row->uid,
      ") is no engine rank: ", absl::StrJoin(why, "; "),
      ". vLLM workers that do not descend from the engine's API server (Ray actors) join "
      "through the store-less rendezvous instead (--vllm-rendezvous unique-id, vLLM >= 0.30.0)"));
}

}  // namespace wsync
