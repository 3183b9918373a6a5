#include "daemon/transport/broadcast/store_peers.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/network_allow_list.h"

namespace wsync {
namespace {

// This host's interface addresses, loopback included.
std::set<std::string> LocalIps() {
  std::set<std::string> out = {"127.0.0.1", "::1"};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    const int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char host[NI_MAXHOST] = {};
    if (::getnameinfo(ifa->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6),
                      host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0) {
      std::string ip = host;
      auto parsed = IpAddress::Parse(ip.substr(0, ip.find('%')));  // without an IPv6 scope id
      if (parsed.ok()) out.insert(parsed->ToString());
    }
  }
  ::freeifaddrs(list);
  return out;
}

bool IsLoopback(const std::string& ip) { return absl::StartsWith(ip, "127.") || ip == "::1"; }

}  // namespace

absl::StatusOr<StorePeers> StorePeersFor(const std::vector<std::string>& engine_urls,
                                         const std::string& advertise_address) {
  StorePeers out;
  out.local_ips = LocalIps();
  std::set<std::string>& peers = out.allowed;
  const std::set<std::string>& local = out.local_ips;
  for (const std::string& url : engine_urls) {
    auto parsed = ParseHttpUrl(url);
    if (!parsed.ok()) return parsed.status();
    auto addresses = ResolveHost(parsed->host);
    if (!addresses.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine URL '", url, "': ", addresses.status().message()));
    }
    bool local_engine = false;
    for (const IpAddress& address : *addresses) {
      const std::string ip = address.ToString();
      peers.insert(ip);
      if (IsLoopback(ip) || local.count(ip) != 0) local_engine = true;
    }
    if (local_engine) out.local_engines.push_back(url);
  }
  if (!out.local_engines.empty()) {
    peers.insert("127.0.0.1");
    peers.insert("::1");
    if (auto adv = ResolveHost(advertise_address); adv.ok()) {
      for (const IpAddress& address : *adv) peers.insert(address.ToString());
    }
  }
  return out;
}

}  // namespace wsync
