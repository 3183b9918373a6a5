#include "daemon/transport/engine_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/network_allow_list.h"

namespace wsync {
namespace {

// A listening socket's row in /proc/net/tcp{,6}.
struct Listener {
  uint32_t uid = 0;
  uint64_t inode = 0;
};

// How /proc/net/tcp{,6} print an address: each 32-bit word of it in host byte order, in hex.
std::string ProcHex(const void* addr, size_t bytes) {
  std::string out;
  for (size_t i = 0; i < bytes; i += 4) {
    uint32_t word;
    std::memcpy(&word, static_cast<const char*>(addr) + i, 4);
    absl::StrAppendFormat(&out, "%08X", word);
  }
  return out;
}

// How /proc/net/tcp{,6} may print the numeric address `ip`: its own form and, for an IPv4
// address, its IPv4-mapped IPv6 form (a dual-stack socket's ::ffff:a.b.c.d). Empty for a host
// name.
std::set<std::string> ProcAddressForms(const std::string& ip) {
  std::set<std::string> out;
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    out.insert(ProcHex(&v4, 4));
    in6_addr mapped{};
    mapped.s6_addr[10] = mapped.s6_addr[11] = 0xff;
    std::memcpy(&mapped.s6_addr[12], &v4, 4);
    out.insert(ProcHex(&mapped, 16));
  } else if (::inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
    out.insert(ProcHex(&v6, 16));
  }
  return out;
}

// The forms of `host` a listening socket's local address may take to serve it, wildcards
// included; empty for a host name (any address serves it).
std::set<std::string> ServingAddresses(const std::string& host) {
  std::set<std::string> out = ProcAddressForms(host);
  if (out.empty()) return out;
  out.insert(std::string(8, '0'));
  out.insert(std::string(32, '0'));
  return out;
}

// The LISTEN rows of one /proc/net/tcp{,6} file on `port` whose address is one of `addresses`
// (any, when empty).
void ReadListeners(const std::string& path, uint16_t port, const std::set<std::string>& addresses,
                   std::vector<Listener>* out) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 10 || f[3] != "0A") continue;  // 0A: TCP_LISTEN
    std::pair<absl::string_view, absl::string_view> local = absl::StrSplit(f[1], ':');
    uint32_t local_port = 0;
    if (!absl::SimpleHexAtoi(local.second, &local_port) || local_port != port) continue;
    if (!addresses.empty() && addresses.count(absl::AsciiStrToUpper(local.first)) == 0) continue;
    Listener l;
    if (!absl::SimpleAtoi(f[7], &l.uid) || !absl::SimpleAtoi(f[9], &l.inode)) continue;
    out->push_back(l);
  }
}

// The numeric entries of `dir` (PIDs under /proc, descriptors under /proc/PID/fd).
std::vector<std::string> NumericEntries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    if (!name.empty() && std::all_of(name.begin(), name.end(), absl::ascii_isdigit)) {
      out.emplace_back(name);
    }
  }
  ::closedir(d);
  return out;
}

// The parent of `pid` from `proc`/PID/stat ("PID (COMM) STATE PPID ..."; COMM may hold spaces
// and parentheses, so the fields are counted from its last ')'); 0 when unreadable.
pid_t ParentOf(pid_t pid, const std::string& proc) {
  std::ifstream in(absl::StrCat(proc, "/", pid, "/stat"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  pid_t parent = 0;
  if (f.size() < 2 || !absl::SimpleAtoi(f[1], &parent)) return 0;
  return parent;
}

// How /proc/net/tcp{,6} may print `ip` with `port` ("0100007F:1F90"), in every form of `ip`.
std::set<std::string> ProcEndpoints(const std::string& ip, uint16_t port) {
  std::set<std::string> out;
  const std::string port_hex = absl::StrFormat(":%04X", port);
  for (const std::string& address : ProcAddressForms(ip)) out.insert(address + port_hex);
  return out;
}

}  // namespace

absl::StatusOr<TcpSocketRow> FindTcpSocket(const std::string& local_ip, uint16_t local_port,
                                           const std::string& remote_ip, uint16_t remote_port,
                                           const std::string& proc) {
  const std::set<std::string> locals = ProcEndpoints(local_ip, local_port);
  const std::set<std::string> remotes = ProcEndpoints(remote_ip, remote_port);
  for (const char* file : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc + file);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 10) continue;
      if (locals.count(absl::AsciiStrToUpper(f[1])) == 0 ||
          remotes.count(absl::AsciiStrToUpper(f[2])) == 0) {
        continue;
      }
      TcpSocketRow row;
      if (!absl::SimpleAtoi(f[7], &row.uid) || !absl::SimpleAtoi(f[9], &row.inode)) continue;
      return row;
    }
  }
  return absl::NotFoundError(absl::StrCat("no TCP socket from ", local_ip, ":", local_port, " to ",
                                          remote_ip, ":", remote_port, " in ", proc,
                                          "/net/tcp or tcp6"));
}

std::vector<pid_t> ProcessTree(const std::vector<pid_t>& roots, const std::string& proc) {
  std::multimap<pid_t, pid_t> children;
  std::set<pid_t> alive;
  for (const std::string& name : NumericEntries(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    alive.insert(pid);
    if (const pid_t parent = ParentOf(pid, proc); parent > 0) children.emplace(parent, pid);
  }
  std::vector<pid_t> tree;
  std::set<pid_t> seen;
  for (pid_t root : roots) {
    if (alive.count(root) != 0 && seen.insert(root).second) tree.push_back(root);
  }
  for (size_t i = 0; i < tree.size(); ++i) {
    auto [first, last] = children.equal_range(tree[i]);
    for (auto it = first; it != last; ++it) {
      if (seen.insert(it->second).second) tree.push_back(it->second);
    }
  }
  return tree;
}

std::string EngineProcess::Describe() const {
  if (servers.empty()) {
    return absl::StrCat("uid ", uid, ", its server process not visible to wsyncd");
  }
  return absl::StrCat("uid ", uid, ", served by pid ", absl::StrJoin(servers, ", "));
}

bool HoldsSocket(pid_t pid, uint64_t inode, const std::string& proc) {
  const std::string fds = absl::StrCat(proc, "/", pid, "/fd");
  const std::string want = absl::StrCat("socket:[", inode, "]");
  char target[64];
  for (const std::string& fd : NumericEntries(fds)) {
    const ssize_t n = ::readlink(absl::StrCat(fds, "/", fd).c_str(), target, sizeof(target));
    if (n > 0 && absl::string_view(target, static_cast<size_t>(n)) == want) return true;
  }
  return false;
}

std::vector<pid_t> EngineProcessFinder::Holders(uint32_t uid, uint64_t inode) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_inode_ == inode && !cached_holders_.empty() &&
        std::all_of(cached_holders_.begin(), cached_holders_.end(),
                    [&](pid_t p) { return HoldsSocket(p, inode, proc_); })) {
      return cached_holders_;
    }
  }
  // The socket's owner's processes first (the usual holders), then the others: a process that
  // changed its user after listening, or one that is not dumpable (its /proc entry is root's).
  std::vector<pid_t> owners;
  std::vector<pid_t> others;
  for (const std::string& name : NumericEntries(proc_)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    struct stat st {};
    if (::stat(absl::StrCat(proc_, "/", name).c_str(), &st) != 0) continue;
    (st.st_uid == uid ? owners : others).push_back(pid);
  }
  std::vector<pid_t> holders;
  for (const auto* pids : {&owners, &others}) {
    for (pid_t pid : *pids) {
      if (HoldsSocket(pid, inode, proc_)) holders.push_back(pid);
    }
    if (!holders.empty()) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  cached_inode_ = inode;
  cached_holders_ = holders;
  return holders;
}

absl::StatusOr<EngineProcess> EngineProcessFinder::Find(absl::string_view url) {
  auto parsed = ParseHttpUrl(url);
  if (!parsed.ok()) return parsed.status();
  const std::set<std::string> addresses = ServingAddresses(parsed->host);
  std::vector<Listener> listeners;
  ReadListeners(proc_ + "/net/tcp", parsed->port, addresses, &listeners);
  ReadListeners(proc_ + "/net/tcp6", parsed->port, addresses, &listeners);
  if (listeners.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, ": no socket listens on port ", parsed->port,
        " in wsyncd's network namespace (", proc_,
        "/net/tcp, tcp6): the engine is on another host or in another network namespace"));
  }
  std::set<uint32_t> uids;
  for (const Listener& l : listeners) uids.insert(l.uid);
  if (uids.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, ": sockets of users ", absl::StrJoin(uids, ", "), " listen on port ",
        parsed->port, ", so wsyncd cannot tell which one is the engine's"));
  }
  EngineProcess out;
  out.uid = *uids.begin();
  out.socket_inode = listeners.front().inode;
  std::set<pid_t> servers;
  for (const Listener& l : listeners) {
    for (pid_t pid : Holders(l.uid, l.inode)) servers.insert(pid);
  }
  out.servers.assign(servers.begin(), servers.end());
  return out;
}

std::optional<PeerCredentials> ParsePeerAddress(absl::string_view address) {
  std::vector<absl::string_view> parts = absl::StrSplit(address, ':');
  if (parts.size() < 4) return std::nullopt;
  const size_t n = parts.size();
  PeerCredentials out;
  if (!absl::SimpleAtoi(parts[n - 3], &out.uid) || !absl::SimpleAtoi(parts[n - 2], &out.gid) ||
      !absl::SimpleAtoi(parts[n - 1], &out.pid) || out.pid < 0) {
    return std::nullopt;
  }
  return out;
}

bool DescendsFrom(pid_t pid, const std::vector<pid_t>& ancestors, const std::string& proc) {
  for (int step = 0; step < 4096 && pid > 0; ++step) {
    if (std::find(ancestors.begin(), ancestors.end(), pid) != ancestors.end()) return true;
    if (pid == 1) return false;
    pid = ParentOf(pid, proc);
  }
  return false;
}

}  // namespace wsync
