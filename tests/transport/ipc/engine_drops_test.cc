#include "daemon/transport/ipc/engine_drops.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(EngineDrops, EnginesAreDroppedOnlyWhileTheQuorumRemains) {
  EngineDrops drops(/*engines=*/4, /*needed=*/2);
  EXPECT_TRUE(drops.TryDrop({{1, absl::InternalError("answered HTTP 500")}}));
  EXPECT_EQ(drops.WhyDropped(1).message(), "answered HTTP 500");
  EXPECT_TRUE(drops.WhyDropped(0).ok());
  // Counted once: an engine dropped already fails again in a pipelined bucket.
  EXPECT_TRUE(drops.TryDrop({{1, absl::InternalError("again")}}));
  EXPECT_EQ(drops.all().at(1).message(), "answered HTTP 500") << "the first reason is kept";
  // Two more would leave one of the two needed: neither is dropped.
  EXPECT_FALSE(drops.TryDrop({{0, absl::InternalError("x")}, {2, absl::InternalError("y")}}));
  EXPECT_TRUE(drops.WhyDropped(0).ok());
  EXPECT_TRUE(drops.WhyDropped(2).ok());
  EXPECT_TRUE(drops.TryDrop({{3, absl::DeadlineExceededError("hung")}}));
  EXPECT_EQ(drops.all().size(), 2u);
  EXPECT_FALSE(drops.TryDrop({{0, absl::InternalError("x")}}));
}

TEST(EngineDrops, WithoutAQuorumNothingIsEverDropped) {
  EngineDrops drops(/*engines=*/3, /*needed=*/0);
  EXPECT_FALSE(drops.TryDrop({{0, absl::InternalError("x")}}));
  EXPECT_TRUE(drops.all().empty());
}

}  // namespace
}  // namespace wsync
