// DeltaBase: the base of a relay group's deltas is a version the members hold whole, settled from
// what they say at each begin, never a mix of two versions, and bounded by its cap.
#include "daemon/transport/relay/delta_base.h"

#include <vector>

#include "gtest/gtest.h"

namespace wsync {
namespace {

BucketManifest OneTensor(const std::string& name, uint64_t bytes) {
  BucketManifest m;
  m.tensors.push_back(TensorEntry{name, DType::kUint8, {static_cast<int64_t>(bytes)}, 0, bytes});
  return m;
}

std::vector<uint8_t> Bytes(uint64_t n, uint8_t value) { return std::vector<uint8_t>(n, value); }

TEST(DeltaBase, TheStagedVersionBecomesTheBaseOnlyWhenTheMembersHoldIt) {
  DeltaBase base(1 << 20);
  const BucketManifest m = OneTensor("w", 16);
  base.Begin("v1", {"", ""});
  EXPECT_EQ(base.version(), "");
  EXPECT_EQ(base.why_none(), "no update has been relayed yet");
  base.Stage(m, Bytes(16, 1));
  // The members hold v1: it is the base, and the bucket laid out from it is v1's bytes.
  base.Begin("v2", {"v1", ""});
  EXPECT_EQ(base.version(), "v1");
  std::vector<uint8_t> out(16, 0);
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 1));
  base.Stage(m, Bytes(16, 2));
  // v2 did not land (the members still hold v1): v1 stays the base, never v2's bytes.
  base.Begin("v3", {"v1", "v1"});
  EXPECT_EQ(base.version(), "v1");
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 1));
  base.Stage(m, Bytes(16, 3));
  base.Begin("v4", {"v3", "v3"});
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 3));
  // No member holds the base any more (both restarted): there is none, and it says why.
  base.Begin("v5", {"", ""});
  EXPECT_EQ(base.version(), "");
  EXPECT_EQ(base.why_none(), "no member holds version 'v3'");
}

TEST(DeltaBase, ATensorNewOrChangedInShapeSendsItsBucketDense) {
  DeltaBase base(1 << 20);
  base.Begin("v1", {""});
  base.Stage(OneTensor("w", 16), Bytes(16, 1));
  base.Begin("v2", {"v1"});
  std::vector<uint8_t> out(32, 0);
  EXPECT_FALSE(base.Assemble(OneTensor("new", 16), absl::MakeSpan(out)));
  EXPECT_FALSE(base.Assemble(OneTensor("w", 32), absl::MakeSpan(out)));
  EXPECT_TRUE(base.Assemble(OneTensor("w", 16), absl::MakeSpan(out)));
}

TEST(DeltaBase, AVersionOverTheCapIsNotStagedAndTheNextUpdateHasNoBase) {
  DeltaBase base(24);
  base.Begin("v1", {""});
  base.Stage(OneTensor("a", 16), Bytes(16, 1));
  base.Stage(OneTensor("b", 16), Bytes(16, 1));  // 32 bytes: over the cap of 24
  EXPECT_EQ(base.bytes(), 0u);
  base.Begin("v2", {"v1"});
  EXPECT_EQ(base.version(), "");
  EXPECT_EQ(base.why_none(), "version 'v1' did not fit the delta base's cap of 24 bytes");
}

}  // namespace
}  // namespace wsync
