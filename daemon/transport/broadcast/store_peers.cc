#include "daemon/transport/broadcast/store_peers.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/net.h"

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
      out.insert(ip.substr(0, ip.find('%')));  // drop an IPv6 scope id
    }
  }
  ::freeifaddrs(list);
  return out;
}

bool IsLoopback(const std::string& ip) { return absl::StartsWith(ip, "127.") || ip == "::1"; }

}  // namespace

absl::StatusOr<std::string> UrlHost(const std::string& url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine URL '", url, "' must start with http://"));
  }
  rest = rest.substr(0, rest.find('/'));
  auto split = SplitHostPort(std::string(rest));
  if (!split.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine URL '", url, "': ", split.status().message()));
  }
  return split->first;
}

absl::StatusOr<std::set<std::string>> StorePeersFor(const std::vector<std::string>& engine_urls,
                                                    const std::string& advertise_address) {
  std::set<std::string> peers;
  bool local_engine = false;
  const std::set<std::string> local = LocalIps();
  for (const std::string& url : engine_urls) {
    auto host = UrlHost(url);
    if (!host.ok()) return host.status();
    auto ips = ResolveHostIps(*host);
    if (!ips.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine URL '", url, "': ", ips.status().message()));
    }
    for (const std::string& ip : *ips) {
      peers.insert(ip);
      if (IsLoopback(ip) || local.count(ip) != 0) local_engine = true;
    }
  }
  if (local_engine) {
    peers.insert("127.0.0.1");
    peers.insert("::1");
    auto adv = ResolveHostIps(advertise_address);
    if (adv.ok()) peers.insert(adv->begin(), adv->end());
  }
  return peers;
}

}  // namespace wsync
