#ifndef WSYNC_COMMON_NETWORK_ALLOW_LIST_H_
#define WSYNC_COMMON_NETWORK_ALLOW_LIST_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// An IPv4 or IPv6 address. An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is held as its IPv4
// address: it reaches the same host, so it must meet the same rules.
struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4: the first 4

  static absl::StatusOr<IpAddress> Parse(absl::string_view text);
  int bits() const { return v6 ? 128 : 32; }
  std::string ToString() const;
  bool operator==(const IpAddress&) const = default;
};

// A network in CIDR form ("10.0.0.0/8", "fd00::/8"); a bare address is a /32 or /128.
struct IpNetwork {
  IpAddress base;
  int prefix = 0;

  // Refuses host bits set below the prefix ("10.0.0.1/8"): such an entry is usually a typo for a
  // single host or for another network, and guessing either way widens or narrows the rule.
  static absl::StatusOr<IpNetwork> Parse(absl::string_view text);
  bool Contains(const IpAddress& address) const;
  std::string ToString() const;
};

// The addresses a host name (or address literal) resolves to.
using HostResolver = std::function<absl::StatusOr<std::vector<IpAddress>>(const std::string&)>;
// getaddrinfo, every address family.
absl::StatusOr<std::vector<IpAddress>> ResolveHost(const std::string& host);

// Which hosts wsyncd may send engine requests to: networks, addresses and host names. A host is
// allowed when its name equals a name entry (case and a trailing dot aside), or when every
// address it resolves to lies in a network entry or among a name entry's addresses. Every
// address, not any: a name that resolves both inside and outside could be reached outside.
class NetworkAllowList {
 public:
  // Entries: "10.0.0.0/8", "fd00::/8", "10.1.2.3", "::1", "engine-0.example.internal".
  // INVALID_ARGUMENT naming the entry that is none of these.
  static absl::StatusOr<NetworkAllowList> Parse(const std::vector<std::string>& entries);
  // 127.0.0.0/8, ::1 and localhost.
  static NetworkAllowList Loopback();

  // OK when `host` may be reached; PERMISSION_DENIED saying which address falls outside (or
  // UNAVAILABLE when the name does not resolve, so nothing can be checked).
  absl::Status Check(const std::string& host, const HostResolver& resolve = ResolveHost) const;
  // Adds a host name or network entry (as Parse takes them).
  absl::Status Add(const std::string& entry);

  // The entries as given, comma-separated: what an error names as the rule.
  std::string Describe() const;
  const std::vector<std::string>& entries() const { return entries_; }

 private:
  std::vector<std::string> entries_;
  std::vector<IpNetwork> networks_;
  std::vector<std::string> names_;  // lower case, no trailing dot
};

// "host" of "http://host[:port][/]", with an IPv6 literal's brackets removed, and the port (80
// when absent). Strict on purpose: userinfo ("a@b"), a path, a query or characters outside host
// names are refused, so that every component that reads the URL (this check, the HTTP clients)
// reads the same host.
struct HttpUrl {
  std::string host;
  uint16_t port = 80;
};
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

}  // namespace wsync

#endif  // WSYNC_COMMON_NETWORK_ALLOW_LIST_H_
