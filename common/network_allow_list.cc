#include "common/network_allow_list.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

IpAddress FromV4(const in_addr& a) {
  IpAddress out;
  std::memcpy(out.bytes.data(), &a, 4);
  return out;
}

IpAddress FromV6(const in6_addr& a) {
  IpAddress out;
  if (std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), a.s6_addr)) {
    std::memcpy(out.bytes.data(), a.s6_addr + 12, 4);
    return out;
  }
  out.v6 = true;
  std::memcpy(out.bytes.data(), a.s6_addr, 16);
  return out;
}

// Letters, digits, '-', '_' and '.': what a DNS name (or /etc/hosts alias) is made of.
bool IsHostNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// Lower case without a trailing dot: "Engine-0.Example." and "engine-0.example" are one name.
std::string NormalizeName(absl::string_view name) {
  return absl::AsciiStrToLower(absl::StripSuffix(name, "."));
}

absl::Status CheckHostName(absl::string_view name) {
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a host name"));
  }
  for (char c : name) {
    if (!IsHostNameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' is not a host name, an IP address or a network (address/prefix)"));
    }
  }
  // Digits and dots only: a mistyped IPv4 address, which a resolver might read as something else
  // ("10.1" is 10.0.0.1 to inet_aton).
  if (std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.';
      })) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an IPv4 address"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IpAddress> IpAddress::Parse(absl::string_view text) {
  const std::string s(text);
  in_addr v4{};
  if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) return FromV4(v4);
  in6_addr v6{};
  if (::inet_pton(AF_INET6, s.c_str(), &v6) == 1) return FromV6(v6);
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an IP address"));
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof(buf));
  return buf;
}

absl::StatusOr<IpNetwork> IpNetwork::Parse(absl::string_view text) {
  IpNetwork net;
  const size_t slash = text.find('/');
  auto base = IpAddress::Parse(text.substr(0, slash));
  if (!base.ok()) return base.status();
  net.base = *base;
  net.prefix = net.base.bits();
  if (slash != absl::string_view::npos) {
    absl::string_view prefix = text.substr(slash + 1);
    // Written as IPv6, counted in IPv6 bits, even when the base is IPv4-mapped.
    const bool written_v6 = absl::StrContains(text.substr(0, slash), ':');
    const int max = written_v6 ? 128 : 32;
    if (prefix.empty() ||
        !std::all_of(prefix.begin(), prefix.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
        !absl::SimpleAtoi(prefix, &net.prefix) || net.prefix > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "': the prefix length must be 0..", max));
    }
    // An IPv4-mapped base ("::ffff:10.0.0.0/104") is held as IPv4: its prefix counts IPv4 bits.
    if (written_v6 && !net.base.v6) {
      if (net.prefix < 96) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", text, "' spans more than the IPv4-mapped range"));
      }
      net.prefix -= 96;
    }
  }
  for (int bit = net.prefix; bit < net.base.bits(); ++bit) {
    if (net.base.bytes[bit / 8] & (0x80 >> (bit % 8))) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' has bits set after its /", net.prefix,
                       " prefix; write the network's first address (or the single host)"));
    }
  }
  return net;
}

bool IpNetwork::Contains(const IpAddress& address) const {
  if (address.v6 != base.v6) return false;
  const int full = prefix / 8;
  if (!std::equal(base.bytes.begin(), base.bytes.begin() + full, address.bytes.begin())) {
    return false;
  }
  if (prefix % 8 == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - prefix % 8));
  return (base.bytes[full] & mask) == (address.bytes[full] & mask);
}

std::string IpNetwork::ToString() const { return absl::StrCat(base.ToString(), "/", prefix); }

absl::StatusOr<std::vector<IpAddress>> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("'", host, "' does not resolve"));
  }
  std::vector<IpAddress> out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    IpAddress a;
    if (ai->ai_family == AF_INET) {
      a = FromV4(reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr);
    } else if (ai->ai_family == AF_INET6) {
      a = FromV6(reinterpret_cast<const sockaddr_in6*>(ai->ai_addr)->sin6_addr);
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  ::freeaddrinfo(res);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("'", host, "' has no IP address"));
  return out;
}

absl::Status NetworkAllowList::Add(const std::string& entry) {
  const std::string e(absl::StripAsciiWhitespace(entry));
  if (e.empty()) return absl::InvalidArgumentError("an empty entry");
  if (std::find(entries_.begin(), entries_.end(), e) != entries_.end()) return absl::OkStatus();
  if (e.find('/') != std::string::npos || e.find(':') != std::string::npos ||
      IpAddress::Parse(e).ok()) {
    auto net = IpNetwork::Parse(e);
    if (!net.ok()) return net.status();
    networks_.push_back(*net);
  } else {
    if (absl::Status s = CheckHostName(e); !s.ok()) return s;
    names_.push_back(NormalizeName(e));
  }
  entries_.push_back(e);
  return absl::OkStatus();
}

absl::StatusOr<NetworkAllowList> NetworkAllowList::Parse(const std::vector<std::string>& entries) {
  NetworkAllowList list;
  for (const std::string& e : entries) {
    if (absl::Status s = list.Add(e); !s.ok()) return s;
  }
  return list;
}

NetworkAllowList NetworkAllowList::Loopback() {
  NetworkAllowList list;
  for (const char* e : {"127.0.0.0/8", "::1", "localhost"}) (void)list.Add(e);
  return list;
}

std::string NetworkAllowList::Describe() const {
  return entries_.empty() ? std::string("(nothing)") : absl::StrJoin(entries_, ", ");
}

absl::Status NetworkAllowList::Check(const std::string& host, const HostResolver& resolve) const {
  const std::string name = NormalizeName(host);
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) return absl::OkStatus();
  std::vector<IpAddress> addresses;
  if (auto literal = IpAddress::Parse(host); literal.ok()) {
    addresses.push_back(*literal);
  } else {
    auto resolved = resolve(host);
    if (!resolved.ok()) {
      return absl::UnavailableError(absl::StrCat("'", host,
                                                 "' does not resolve, so it cannot be checked "
                                                 "against the allowed hosts"));
    }
    addresses = std::move(*resolved);
  }
  // Name entries stand for their addresses too: they are resolved only when an address is not
  // in a network entry, as rarely as possible.
  std::vector<IpAddress> named;
  bool named_resolved = false;
  for (const IpAddress& a : addresses) {
    if (std::any_of(networks_.begin(), networks_.end(),
                    [&](const IpNetwork& n) { return n.Contains(a); })) {
      continue;
    }
    if (!named_resolved) {
      named_resolved = true;
      for (const std::string& n : names_) {
        auto r = resolve(n);
        if (r.ok()) named.insert(named.end(), r->begin(), r->end());
      }
    }
    if (std::find(named.begin(), named.end(), a) != named.end()) continue;
    const std::string what =
        a.ToString() == host ? host
                             : absl::StrCat("'", host, "' resolves to ", a.ToString(), ", which");
    return absl::PermissionDeniedError(absl::StrCat(what, " is not in ", Describe()));
  }
  return absl::OkStatus();
}

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  absl::string_view rest = url;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("engine url '", url, "' ", why));
  };
  if (!absl::ConsumePrefix(&rest, "http://")) return bad("must start with http://");
  const size_t slash = rest.find('/');
  if (slash != absl::string_view::npos && slash + 1 != rest.size()) {
    return bad("may not have a path: give http://host:port");
  }
  absl::string_view authority = rest.substr(0, slash);
  HttpUrl out;
  absl::string_view port;
  if (absl::ConsumePrefix(&authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return bad("has an unclosed '['");
    absl::string_view literal = authority.substr(0, close);
    in6_addr ignored{};
    if (literal.empty() ||
        !std::all_of(literal.begin(), literal.end(),
                     [](char c) {
                       return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':';
                     }) ||
        ::inet_pton(AF_INET6, std::string(literal).c_str(), &ignored) != 1) {
      return bad("has no valid IPv6 address between '[' and ']'");
    }
    out.host = std::string(literal);
    authority.remove_prefix(close + 1);
    if (!authority.empty()) {
      if (!absl::ConsumePrefix(&authority, ":")) {
        return bad("has something other than ':port' after ']'");
      }
      if (authority.empty()) return bad("has an empty port");
      port = authority;
    }
  } else {
    const size_t colon = authority.find(':');
    absl::string_view host = authority.substr(0, colon);
    if (host.empty() || !std::all_of(host.begin(), host.end(), IsHostNameChar)) {
      return bad("has no valid host (letters, digits, '-', '_', '.', or [IPv6])");
    }
    out.host = std::string(host);
    if (colon != absl::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("has an empty port");
    }
  }
  if (!port.empty()) {
    uint32_t p = 0;
    if (!std::all_of(port.begin(), port.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
        !absl::SimpleAtoi(port, &p) || p == 0 || p > 65535) {
      return bad("has no valid port (1-65535)");
    }
    out.port = static_cast<uint16_t>(p);
  }
  return out;
}

}  // namespace wsync
