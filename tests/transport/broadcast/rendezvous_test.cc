#include <set>

#include "daemon/transport/broadcast/store_peers.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(StorePeers, OnlyTheEnginesAddressesAndLocalOnesForALocalEngineGetIn) {
  auto remote =
      StorePeersFor({"http://10.123.45.67:30000", "http://10.123.45.68:30000/"}, "127.0.0.1");
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(remote->allowed, (std::set<std::string>{"10.123.45.67", "10.123.45.68"}));
  EXPECT_TRUE(remote->local_engines.empty());
  auto local = StorePeersFor({"http://127.0.0.1:30000", "http://10.123.45.67:30000"}, "127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->allowed.count("127.0.0.1"), 1u);
  EXPECT_EQ(local->allowed.count("::1"), 1u);
  EXPECT_EQ(local->local_engines, std::vector<std::string>{"http://127.0.0.1:30000"});
  EXPECT_EQ(local->local_ips.count("127.0.0.1"), 1u);
  EXPECT_EQ(StorePeersFor({"https://10.0.0.1:1"}, "127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StorePeersFor({"http://no-such-host.invalid:1"}, "127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TorchStoreRendezvous, UniqueIdKeyMatchesTheHelpersPrefixChain) {
  EXPECT_EQ(TorchStoreRendezvous::UniqueIdKey("weight_sync"), "/weight_sync/weight_sync//cuda//0");
  EXPECT_EQ(TorchStoreRendezvous::UniqueIdKey("weight_update_group").size(), 49u);
}

}  // namespace
}  // namespace wsync
