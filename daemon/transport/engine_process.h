#ifndef WSYNC_DAEMON_TRANSPORT_ENGINE_PROCESS_H_
#define WSYNC_DAEMON_TRANSPORT_ENGINE_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// The local process that serves an engine's HTTP port, as /proc shows it to wsyncd: the owner of
// the listening socket (the uid column of /proc/net/tcp and tcp6) and the processes that hold
// it. An engine's workers run as that user and descend from those processes (SGLang's scheduler
// processes are children of the process that serves its HTTP API).
struct EngineProcess {
  uint32_t uid = 0;
  uint64_t socket_inode = 0;
  // Empty when wsyncd cannot see them: their descriptors are another user's and wsyncd is not
  // root, or they run in a PID namespace wsyncd does not see.
  std::vector<pid_t> servers;

  // "uid 1000, served by pid 4242" (or "..., its server not visible to wsyncd").
  std::string Describe() const;
};

// Finds the processes that hold listening sockets; remembers the last one found per socket, so
// that a lookup for the same engine checks one process's descriptors instead of every one's.
class EngineProcessFinder {
 public:
  // `proc` is procfs's mount point ("/proc").
  explicit EngineProcessFinder(std::string proc = "/proc") : proc_(std::move(proc)) {}

  // The process serving `url`'s port in wsyncd's network namespace: a listening TCP socket on the
  // port, on the URL's address or a wildcard one (any address for a host name). Fails when there
  // is none (the engine is not local, or is in another network namespace) or when sockets of
  // different users listen there.
  absl::StatusOr<EngineProcess> Find(absl::string_view url);

 private:
  std::vector<pid_t> Holders(uint32_t uid, uint64_t inode);

  const std::string proc_;
  std::mutex mu_;
  uint64_t cached_inode_ = 0;
  std::vector<pid_t> cached_holders_;
};

// A unix socket peer's credentials, as libzmq reports them in a connection's Peer-Address
// ("<host>:<uid>:<gid>:<pid>", from SO_PEERCRED at connect time, in wsyncd's namespaces; pid 0
// is a process outside wsyncd's PID namespace).
struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  pid_t pid = 0;
};
std::optional<PeerCredentials> ParsePeerAddress(absl::string_view address);

// A connected TCP socket of wsyncd's network namespace as /proc/net/tcp{,6} show it: the user
// that made it (the uid column) and its inode (0 once no process holds it).
struct TcpSocketRow {
  uint32_t uid = 0;
  uint64_t inode = 0;
};
// The socket whose own end is local_ip:local_port and whose other end is remote_ip:remote_port
// (IPs in PeerIp's form; an IPv4 end is also found in its IPv4-mapped IPv6 form). NotFound when
// no such socket is in `proc`/net/tcp or tcp6.
absl::StatusOr<TcpSocketRow> FindTcpSocket(const std::string& local_ip, uint16_t local_port,
                                           const std::string& remote_ip, uint16_t remote_port,
                                           const std::string& proc = "/proc");

// `roots` and every process that descends from one, found by each process's parent in
// `proc`/PID/stat (roots that no longer exist are left out).
std::vector<pid_t> ProcessTree(const std::vector<pid_t>& roots, const std::string& proc = "/proc");

// Whether process `pid` holds socket `inode` (one of its descriptors is "socket:[inode]"). False
// when wsyncd may not read its descriptors.
bool HoldsSocket(pid_t pid, uint64_t inode, const std::string& proc = "/proc");

// Whether `pid` is one of `ancestors` or descends from one, following each process's parent in
// `proc`/PID/stat (at most 4096 steps).
bool DescendsFrom(pid_t pid, const std::vector<pid_t>& ancestors,
                  const std::string& proc = "/proc");

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_ENGINE_PROCESS_H_
