// The engine allow-list's matcher: CIDR matching for IPv4 and IPv6, host names, resolution, and
// the strict engine URL parser the check reads hosts with.
#include "common/network_allow_list.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

IpAddress Ip(const char* text) {
  auto a = IpAddress::Parse(text);
  EXPECT_TRUE(a.ok()) << text;
  return a.ok() ? *a : IpAddress{};
}

bool In(const char* network, const char* address) {
  auto n = IpNetwork::Parse(network);
  EXPECT_TRUE(n.ok()) << network << ": " << n.status();
  return n.ok() && n->Contains(Ip(address));
}

// A resolver that knows only the names it is given, and counts its calls.
struct FakeDns {
  std::map<std::string, std::vector<std::string>> names;
  int calls = 0;
  HostResolver resolver() {
    return [this](const std::string& host) -> absl::StatusOr<std::vector<IpAddress>> {
      ++calls;
      auto it = names.find(host);
      if (it == names.end()) return absl::UnavailableError("no such name");
      std::vector<IpAddress> out;
      for (const std::string& a : it->second) out.push_back(*IpAddress::Parse(a));
      return out;
    };
  }
};

TEST(IpNetwork, Ipv4PrefixesMatchOnTheirBitsOnly) {
  EXPECT_TRUE(In("10.0.0.0/8", "10.255.1.2"));
  EXPECT_FALSE(In("10.0.0.0/8", "11.0.0.1"));
  EXPECT_TRUE(In("192.168.4.0/22", "192.168.7.255"));
  EXPECT_FALSE(In("192.168.4.0/22", "192.168.8.0"));
  EXPECT_FALSE(In("192.168.4.0/22", "192.168.3.255"));
  EXPECT_TRUE(In("10.1.2.3", "10.1.2.3")) << "a bare address is a /32";
  EXPECT_FALSE(In("10.1.2.3", "10.1.2.4"));
  EXPECT_TRUE(In("0.0.0.0/0", "8.8.8.8"));
  EXPECT_FALSE(In("0.0.0.0/0", "::1")) << "an IPv4 network holds no IPv6 address";
}

TEST(IpNetwork, Ipv6PrefixesAndIpv4MappedAddresses) {
  EXPECT_TRUE(In("fd00::/8", "fd12:3456::1"));
  EXPECT_FALSE(In("fd00::/8", "fe80::1"));
  EXPECT_TRUE(In("2001:db8::/33", "2001:db8:7fff::1"));
  EXPECT_FALSE(In("2001:db8::/33", "2001:db8:8000::1"));
  EXPECT_TRUE(In("::1", "::1"));
  EXPECT_FALSE(In("::1", "::2"));
  // ::ffff:127.0.0.1 reaches 127.0.0.1: it meets the IPv4 rules, whichever way either is written.
  EXPECT_TRUE(In("127.0.0.0/8", "::ffff:127.0.0.1"));
  EXPECT_FALSE(In("::/0", "::ffff:10.0.0.1")) << "held as IPv4, not as an IPv6 address";
  EXPECT_TRUE(In("::ffff:10.0.0.0/104", "10.9.8.7"));
  EXPECT_FALSE(In("::ffff:10.0.0.0/104", "11.0.0.1"));
}

TEST(IpNetwork, MalformedNetworksAreRefusedWithTheReason) {
  EXPECT_THAT(IpNetwork::Parse("10.0.0.0/33").status().message(), HasSubstr("0..32"));
  EXPECT_THAT(IpNetwork::Parse("fd00::/129").status().message(), HasSubstr("0..128"));
  EXPECT_THAT(IpNetwork::Parse("10.0.0.0/").status().message(), HasSubstr("prefix length"));
  EXPECT_THAT(IpNetwork::Parse("10.0.0.0/+8").status().message(), HasSubstr("prefix length"));
  EXPECT_THAT(IpNetwork::Parse("10.0.0.1/8").status().message(), HasSubstr("bits set after"));
  EXPECT_THAT(IpNetwork::Parse("::ffff:10.0.0.0/64").status().message(), HasSubstr("IPv4-mapped"));
  EXPECT_FALSE(IpNetwork::Parse("10.0.0/8").ok());
}

TEST(NetworkAllowList, EntriesAreNetworksAddressesOrHostNames) {
  auto list = NetworkAllowList::Parse(
      {"10.0.0.0/8", " fd00::/8 ", "192.168.1.7", "::1", "Engine-0.Example.Internal."});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->Describe(), "10.0.0.0/8, fd00::/8, 192.168.1.7, ::1, Engine-0.Example.Internal.");
  for (const char* bad : {"", "10.0.0.0/40", "1.2.3", "*.example.com", "a b", "http://x",
                          "10.0.0.1/8", "fe80::1%eth0"}) {
    EXPECT_EQ(NetworkAllowList::Parse({bad}).status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
  }
  EXPECT_THAT(NetworkAllowList::Parse({"1.2.3"}).status().message(),
              HasSubstr("not an IPv4 address"));
}

TEST(NetworkAllowList, AddressesMustLieInANetworkEntry) {
  FakeDns dns;
  auto list = *NetworkAllowList::Parse({"10.0.0.0/8", "fd00::/8"});
  EXPECT_TRUE(list.Check("10.3.2.1", dns.resolver()).ok());
  EXPECT_TRUE(list.Check("fd00::5", dns.resolver()).ok());
  absl::Status s = list.Check("172.16.0.1", dns.resolver());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "172.16.0.1 is not in 10.0.0.0/8, fd00::/8");
  EXPECT_EQ(dns.calls, 0) << "address literals are never resolved";
}

TEST(NetworkAllowList, ANameIsAllowedByNameOrWhenAllItsAddressesAreAllowed) {
  FakeDns dns;
  dns.names = {{"engine-0.internal", {"10.0.0.5"}},
               {"split.internal", {"10.0.0.6", "172.16.0.9"}},
               {"gpu-node", {"192.168.1.20"}},
               {"other-name-of-gpu-node", {"192.168.1.20"}}};
  auto list = *NetworkAllowList::Parse({"10.0.0.0/8", "gpu-node", "Listed.Internal"});
  EXPECT_TRUE(list.Check("engine-0.internal", dns.resolver()).ok());
  EXPECT_TRUE(list.Check("listed.internal.", dns.resolver()).ok()) << "matched by name";
  EXPECT_TRUE(list.Check("LISTED.internal", dns.resolver()).ok());
  // Another name of a listed host, and its address: the name entry stands for its addresses.
  EXPECT_TRUE(list.Check("other-name-of-gpu-node", dns.resolver()).ok());
  EXPECT_TRUE(list.Check("192.168.1.20", dns.resolver()).ok());
  // One address outside is enough to refuse: a client may connect to any of them.
  absl::Status s = list.Check("split.internal", dns.resolver());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("'split.internal' resolves to 172.16.0.9, which is not in"));
  EXPECT_EQ(list.Check("nowhere.internal", dns.resolver()).code(), absl::StatusCode::kUnavailable);
}

TEST(NetworkAllowList, LoopbackCoversTheLocalHostAndNothingElse) {
  FakeDns dns;
  dns.names = {{"db.internal", {"10.0.0.7"}}};
  NetworkAllowList list = NetworkAllowList::Loopback();
  EXPECT_TRUE(list.Check("127.0.0.1", dns.resolver()).ok());
  EXPECT_TRUE(list.Check("127.1.2.3", dns.resolver()).ok());
  EXPECT_TRUE(list.Check("::1", dns.resolver()).ok());
  EXPECT_TRUE(list.Check("localhost", dns.resolver()).ok());
  EXPECT_EQ(list.Check("db.internal", dns.resolver()).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(list.Check("0.0.0.0", dns.resolver()).code(), absl::StatusCode::kPermissionDenied)
      << "0.0.0.0 reaches this host too, but only an entry that names it allows it";
  EXPECT_EQ(list.Check("169.254.169.254", dns.resolver()).code(),
            absl::StatusCode::kPermissionDenied);
  // The system resolver: numeric forms inet_aton takes ("2130706433" is 127.0.0.1) are checked
  // by the address they reach.
  EXPECT_TRUE(list.Check("2130706433").ok());
}

TEST(ParseHttpUrl, TakesHostAndPortAndNothingAmbiguous) {
  auto u = ParseHttpUrl("http://engine-0.example:30000");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "engine-0.example");
  EXPECT_EQ(u->port, 30000);
  EXPECT_EQ(ParseHttpUrl("http://10.0.0.1/")->port, 80);
  EXPECT_EQ(ParseHttpUrl("http://[fd00::1]:8080")->host, "fd00::1");
  EXPECT_EQ(ParseHttpUrl("http://[::1]")->port, 80);
  for (const char* bad :
       {"https://a:1", "a:1", "http://", "http://:80", "http://a:", "http://a:0", "http://a:65536",
        "http://a:1x", "http://127.0.0.1@10.0.0.1:80", "http://a:1/prefix", "http://a:1?q",
        "http://a:1#f", "http://[fd00::1", "http://[fd00::1]x", "http://[::ffff:1.2.3.4]:1",
        "http://[fe80::1%25eth0]:1", "http://a b:1"}) {
    EXPECT_EQ(ParseHttpUrl(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseHttpUrl("http://a:1/x").status().message(), HasSubstr("may not have a path"));
}

}  // namespace
}  // namespace wsync
