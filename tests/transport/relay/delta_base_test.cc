// DeltaBase: the base of a relay group's deltas is a version the members hold whole, known by
// its fingerprint and settled from what they say at each begin, never a mix of two versions, and
// bounded by its cap.
#include "daemon/transport/relay/delta_base.h"

#include <vector>

#include "common/checksum.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

BucketManifest OneTensor(const std::string& name, uint64_t bytes) {
  BucketManifest m;
  m.tensors.push_back(TensorEntry{name, DType::kUint8, {static_cast<int64_t>(bytes)}, 0, bytes});
  return m;
}

std::vector<uint8_t> Bytes(uint64_t n, uint8_t value) { return std::vector<uint8_t>(n, value); }

// Stages `m` holding `bytes` as bucket 0 of the open update; returns the fingerprint a member
// holding that version whole reports.
std::string StageOne(DeltaBase& base, const std::string& label, const BucketManifest& m,
                     const std::vector<uint8_t>& bytes) {
  const uint32_t crc = Crc32(bytes.data(), bytes.size());
  base.Stage(0, m, crc, bytes);
  VersionFingerprint print;
  print.Add(0, m, crc);
  return print.Of(label);
}

TEST(DeltaBase, TheStagedVersionBecomesTheBaseOnlyWhenTheMembersHoldIt) {
  DeltaBase base(1 << 20);
  const BucketManifest m = OneTensor("w", 16);
  base.Begin("v1", {"", ""});
  EXPECT_EQ(base.version(), "");
  EXPECT_EQ(base.why_none(), "no update has been relayed yet");
  const std::string v1 = StageOne(base, "v1", m, Bytes(16, 1));
  // The members hold v1: it is the base, and the bucket laid out from it is v1's bytes.
  base.Begin("v2", {v1, ""});
  EXPECT_EQ(base.version(), v1);
  std::vector<uint8_t> out(16, 0);
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 1));
  StageOne(base, "v2", m, Bytes(16, 2));
  // v2 did not land (the members still hold v1): v1 stays the base, never v2's bytes.
  base.Begin("v3", {v1, v1});
  EXPECT_EQ(base.version(), v1);
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 1));
  const std::string v3 = StageOne(base, "v3", m, Bytes(16, 3));
  base.Begin("v4", {v3, v3});
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 3));
  // No member holds the base any more (both restarted): there is none, and it says why.
  base.Begin("v5", {"", ""});
  EXPECT_EQ(base.version(), "");
  EXPECT_EQ(base.why_none(), "no member holds version '" + v3 + "'");
}

// A trainer pushes the same label again with other bytes and that update fails after some of
// its buckets were staged: the members still hold the first push's bytes under that label, and
// the base must stay those bytes, not the second push's.
TEST(DeltaBase, ALabelPushedTwiceWithOtherBytesIsAnotherVersion) {
  DeltaBase base(1 << 20);
  const BucketManifest m = OneTensor("w", 16);
  base.Begin("step-100", {""});
  const std::string first = StageOne(base, "step-100", m, Bytes(16, 1));
  base.Begin("step-100", {first});
  const std::string second = StageOne(base, "step-100", m, Bytes(16, 2));
  EXPECT_NE(first, second);
  base.Begin("step-101", {first});
  EXPECT_EQ(base.version(), first);
  std::vector<uint8_t> out(16, 0);
  ASSERT_TRUE(base.Assemble(m, absl::MakeSpan(out)));
  EXPECT_EQ(out, Bytes(16, 1));
}

TEST(DeltaBase, ATensorNewOrChangedInShapeSendsItsBucketDense) {
  DeltaBase base(1 << 20);
  base.Begin("v1", {""});
  const std::string v1 = StageOne(base, "v1", OneTensor("w", 16), Bytes(16, 1));
  base.Begin("v2", {v1});
  std::vector<uint8_t> out(32, 0);
  EXPECT_FALSE(base.Assemble(OneTensor("new", 16), absl::MakeSpan(out)));
  EXPECT_FALSE(base.Assemble(OneTensor("w", 32), absl::MakeSpan(out)));
  EXPECT_TRUE(base.Assemble(OneTensor("w", 16), absl::MakeSpan(out)));
}

TEST(DeltaBase, AVersionOverTheCapIsNotStagedAndTheNextUpdateHasNoBase) {
  DeltaBase base(24);
  base.Begin("v1", {""});
  const std::vector<uint8_t> bytes = Bytes(16, 1);
  base.Stage(0, OneTensor("a", 16), Crc32(bytes.data(), 16), bytes);
  base.Stage(1, OneTensor("b", 16), Crc32(bytes.data(), 16), bytes);  // 32 bytes: over 24
  EXPECT_EQ(base.bytes(), 0u);
  base.Begin("v2", {"v1#0000000000000000"});
  EXPECT_EQ(base.version(), "");
  EXPECT_EQ(base.why_none(), "version 'v1' did not fit the delta base's cap of 24 bytes");
}

}  // namespace
}  // namespace wsync
