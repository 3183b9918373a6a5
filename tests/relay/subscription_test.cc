// What a downstream wsyncd's subscription must match (daemon/relay/subscription.h), and the
// registry of the subscriptions held now.
#include "daemon/relay/subscription.h"

#include <string>
#include <vector>

#include "daemon/relay/relay_subscribers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

RelaySubscription Want() {
  RelaySubscription s;
  s.protocol_version = kRelayProtocolVersion;
  s.platform = "cuda";
  s.nccl_version = "2.28.9";
  s.node = "rollout-7";
  s.groups = {"policy"};
  s.slot_bytes = 512 << 20;
  return s;
}

RelayUpstream Have() {
  RelayUpstream u;
  u.platform = "cuda";
  u.nccl_version = "2.28.9";
  u.token_groups = {"policy", "ref"};
  u.check_group = [](const std::string& g, const std::string& node) -> absl::Status {
    if (g != "policy" && g != "ref") return absl::NotFoundError("no group '" + g + "'");
    if (node != "rollout-7" && node != "rollout-8") {
      return absl::PermissionDeniedError("node " + node + " is not a member of '" + g + "'");
    }
    return absl::OkStatus();
  };
  u.slot_bytes = 512 << 20;
  return u;
}

TEST(CheckSubscription, AMatchingSubscriptionIsAdmitted) {
  EXPECT_TRUE(CheckSubscription(Want(), Have()).ok());
  RelaySubscription both = Want();
  both.groups = {"policy", "ref"};
  both.slot_bytes = 1 << 30;  // larger slots than the upstream's hold every bucket
  EXPECT_TRUE(CheckSubscription(both, Have()).ok());
}

TEST(CheckSubscription, EachMismatchIsRefusedNamingBothSides) {
  struct Case {
    void (*change)(RelaySubscription&);
    absl::StatusCode code;
    std::vector<std::string> named;
  };
  const Case cases[] = {
      {[](RelaySubscription& s) { s.protocol_version = kRelayProtocolVersion + 1; },
       absl::StatusCode::kFailedPrecondition,
       {"relay protocol 4", "this wsyncd speaks 3"}},
      {[](RelaySubscription& s) { s.platform = "host"; },
       absl::StatusCode::kFailedPrecondition,
       {"the host platform", "the cuda platform"}},
      {[](RelaySubscription& s) { s.nccl_version = "2.27.3"; },
       absl::StatusCode::kFailedPrecondition,
       {"NCCL is 2.27.3", "this wsyncd's is 2.28.9", "--nccl-lib"}},
      {[](RelaySubscription& s) {
         s.groups = {"policy", "critic"};
       },
       absl::StatusCode::kPermissionDenied,
       {"does not name group 'critic'", "it names policy, ref"}},
      {[](RelaySubscription& s) { s.slot_bytes = 256 << 20; },
       absl::StatusCode::kFailedPrecondition,
       {"hold 268435456 bytes", "this wsyncd's 536870912", "--slot-bytes"}},
      {[](RelaySubscription& s) { s.groups = {}; },
       absl::StatusCode::kInvalidArgument,
       {"at least one group"}},
      {[](RelaySubscription& s) {
         s.groups = {"policy", "policy"};
       },
       absl::StatusCode::kInvalidArgument,
       {"'policy' twice"}},
      {[](RelaySubscription& s) { s.node = "node\nforged log line"; },
       absl::StatusCode::kInvalidArgument,
       {"node"}},
      {[](RelaySubscription& s) { s.node = std::string(kMaxRelayText + 1, 'n'); },
       absl::StatusCode::kInvalidArgument,
       {"node"}},
      {[](RelaySubscription& s) { s.groups = std::vector<std::string>(kMaxRelayGroups + 1, "g"); },
       absl::StatusCode::kInvalidArgument,
       {"at most 64 groups"}},
  };
  for (const Case& c : cases) {
    RelaySubscription want = Want();
    c.change(want);
    absl::Status s = CheckSubscription(want, Have());
    EXPECT_EQ(s.code(), c.code) << s;
    for (const std::string& text : c.named) EXPECT_THAT(s.message(), HasSubstr(text)) << s;
  }
}

TEST(CheckSubscription, ATokenBoundToNodesAdmitsThoseNodesOnly) {
  RelayUpstream have = Have();
  have.token_nodes = {"rollout-1", "rollout-8"};
  RelaySubscription want = Want();  // rollout-7, which the group names
  absl::Status s = CheckSubscription(want, have);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr("bound to node(s) rollout-1, rollout-8"));
  EXPECT_THAT(s.message(), HasSubstr("subscribed as node 'rollout-7'"));
  want.node = "rollout-8";
  EXPECT_TRUE(CheckSubscription(want, have).ok());
}

TEST(CheckSubscription, AGroupTheUpstreamDoesNotHaveIsNotFound) {
  RelayUpstream have = Have();
  have.token_groups.push_back("later");
  RelaySubscription want = Want();
  want.groups = {"later"};
  absl::Status s = CheckSubscription(want, have);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("no group 'later'"));
}

TEST(CheckSubscription, ANodeOutsideTheGroupOrWithABadNameOrTinyBucketsIsRefused) {
  RelaySubscription want = Want();
  want.node = "rollout-9";
  absl::Status s = CheckSubscription(want, Have());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr("node rollout-9 is not a member of 'policy'"));
  want.node = "rollout 7";
  s = CheckSubscription(want, Have());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("letters, digits"));
  want = Want();
  want.bucket_rules.close_after_bytes = 4096;
  s = CheckSubscription(want, Have());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("close buckets after 4096 bytes"));
  want.bucket_rules.close_after_bytes = kMinRelayCloseAfterBytes;
  EXPECT_TRUE(CheckSubscription(want, Have()).ok());
}

TEST(RelayMemberNode, ReadsOnlyWsyncdUrlsWithANodeName) {
  EXPECT_EQ(RelayMemberNode("wsyncd://rollout-1").value(), "rollout-1");
  for (const char* bad :
       {"http://rollout-1", "wsyncd://", "wsyncd://a/b", "wsyncd://a:1", "rollout-1"}) {
    EXPECT_EQ(RelayMemberNode(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CheckSubscription, HostModeMatchesWithoutNccl) {
  RelaySubscription want = Want();
  want.platform = "host";
  want.nccl_version = "";
  RelayUpstream have = Have();
  have.platform = "host";
  have.nccl_version = "";
  EXPECT_TRUE(CheckSubscription(want, have).ok());
  want.nccl_version = "2.28.9";
  absl::Status s = CheckSubscription(want, have);
  EXPECT_THAT(s.message(), HasSubstr("this wsyncd's is none"));
}

TEST(RelaySubscribers, SubscriptionsAreListedByGroupUntilRemoved) {
  RelaySubscribers subscribers;
  RelaySubscription a = Want();
  RelaySubscription b = Want();
  b.node = "rollout-8";
  b.groups = {"policy", "ref"};
  const std::string first = *subscribers.Add(a, "TCP 10.0.0.7");
  const std::string second = *subscribers.Add(b, "TCP 10.0.0.8");
  EXPECT_EQ(first, "s1");
  EXPECT_EQ(second, "s2");
  ASSERT_EQ(subscribers.OfGroup("policy").size(), 2u);
  ASSERT_EQ(subscribers.OfGroup("ref").size(), 1u);
  EXPECT_EQ(subscribers.OfGroup("ref")[0].subscription.node, "rollout-8");
  subscribers.Remove(first);
  subscribers.Remove(first);
  ASSERT_EQ(subscribers.List().size(), 1u);
  EXPECT_EQ(subscribers.List()[0].id, "s2");
  // Node rollout-8 holds "ref" (and "policy"): a second subscription of it to either waits.
  RelaySubscription again = b;
  again.groups = {"ref"};
  absl::StatusOr<std::string> twice = subscribers.Add(again, "TCP 10.0.0.8");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(twice.status().message(), HasSubstr("already holds subscription s2"));
  EXPECT_EQ(*subscribers.Add(a, "TCP 10.0.0.7"), "s3") << "ids are not reused";
}

}  // namespace
}  // namespace wsync
