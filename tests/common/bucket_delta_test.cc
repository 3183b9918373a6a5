// Bucket deltas (common/delta): what changed since a base, per element at each dtype's width, in
// the smallest form; decoded back to the exact bytes, and every malformed frame refused.
#include "common/delta/bucket_delta.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/delta_test_data.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

using delta_test::Changed;
using delta_test::Manifest;
using delta_test::RandomBytes;

TEST(BucketDelta, EveryDensityAndDtypeDecodesToTheExactBytes) {
  const BucketManifest m = delta_test::OddManifest();
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 1);
  for (double fraction : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
    uint64_t changed = 0;
    const std::vector<uint8_t> next = Changed(m, base, fraction, 7, &changed);
    DeltaStats encoded;
    absl::StatusOr<std::string> frame = EncodeBucketDelta(m, base, next, &encoded);
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(encoded.changed_elements, changed) << fraction;
    std::vector<uint8_t> out(m.span_bytes(), 0xAB);
    DeltaStats decoded;
    ASSERT_TRUE(DecodeBucketDelta(m, base, *frame, absl::MakeSpan(out), &decoded).ok()) << fraction;
    EXPECT_EQ(out, next) << fraction;
    EXPECT_EQ(decoded.changed_elements, encoded.changed_elements);
    EXPECT_EQ(encoded.frame_bytes, frame->size());
    // Never much more than dense: a header per tensor at most.
    EXPECT_LE(frame->size(), m.span_bytes() + 8 + 17 * m.tensors.size()) << fraction;
    // Decoded in place, over the base itself.
    std::vector<uint8_t> in_place = base;
    ASSERT_TRUE(DecodeBucketDelta(m, in_place, *frame, absl::MakeSpan(in_place)).ok());
    EXPECT_EQ(in_place, next) << fraction;
  }
}

TEST(BucketDelta, OnePercentOfBf16TakesUnderTwoPercentOfDense) {
  // The sparse target: at about 1 % of elements changed, at most 2 % of the dense bytes (plain
  // int32 positions and bf16 values would take 3 %).
  const BucketManifest m = Manifest({{DType::kBfloat16, 1 << 20}});
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 2);
  const std::vector<uint8_t> next = Changed(m, base, 0.01, 3);
  DeltaStats stats;
  absl::StatusOr<std::string> frame = EncodeBucketDelta(m, base, next, &stats);
  ASSERT_TRUE(frame.ok());
  EXPECT_EQ(stats.changed_elements, 10486u);
  EXPECT_LT(static_cast<double>(frame->size()), 0.02 * static_cast<double>(m.span_bytes()))
      << frame->size() << " of " << m.span_bytes();
  EXPECT_EQ(static_cast<uint8_t>((*frame)[8]), static_cast<uint8_t>(DeltaForm::kGaps));
  // Unchanged, it is a header; all changed, dense.
  ASSERT_EQ(EncodeBucketDelta(m, base, base)->size(), 8u + 17u);
  const std::vector<uint8_t> all = Changed(m, base, 1.0, 4);
  EXPECT_EQ(static_cast<uint8_t>((*EncodeBucketDelta(m, base, all))[8]),
            static_cast<uint8_t>(DeltaForm::kDense));
  // Denser, scattered: the bitmap.
  const std::vector<uint8_t> fifth = Changed(m, base, 0.2, 5);
  EXPECT_EQ(static_cast<uint8_t>((*EncodeBucketDelta(m, base, fifth))[8]),
            static_cast<uint8_t>(DeltaForm::kBitmap));
  // Under a limit of the span: all changed is refused before a frame is written, its elements
  // counted; 1 % still encodes, to the same frame.
  DeltaStats counted;
  absl::StatusOr<std::string> over = EncodeBucketDelta(m, base, all, &counted, m.span_bytes());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_THAT(over.status().message(), HasSubstr("at least"));
  EXPECT_EQ(counted.changed_elements, counted.elements);
  absl::StatusOr<std::string> under = EncodeBucketDelta(m, base, next, nullptr, m.span_bytes());
  ASSERT_TRUE(under.ok()) << under.status();
  EXPECT_EQ(*under, *frame);
}

TEST(BucketDelta, MalformedFramesAreRefusedNamingWhatWasWrong) {
  const BucketManifest m = delta_test::MalformedManifest();
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 9);
  const std::vector<uint8_t> next = Changed(m, base, 0.05, 10);
  const std::string good = *EncodeBucketDelta(m, base, next);
  ASSERT_EQ(good[8], static_cast<char>(DeltaForm::kGaps));
  std::vector<uint8_t> out(m.span_bytes());
  const auto decode = [&](const std::string& frame) {
    return DecodeBucketDelta(m, base, frame, absl::MakeSpan(out));
  };
  ASSERT_TRUE(decode(good).ok());
  for (const delta_test::MalformedFrame& c : delta_test::MalformedFrames(good)) {
    absl::Status s = decode(c.frame);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.named;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.named)) << s;
  }
  // Spans shorter than the bucket.
  std::vector<uint8_t> small(m.span_bytes() - 1);
  EXPECT_THAT(std::string(DecodeBucketDelta(m, base, good, absl::MakeSpan(small)).message()),
              HasSubstr("the output holds"));
  EXPECT_FALSE(EncodeBucketDelta(m, small, next).ok());
}

}  // namespace
}  // namespace wsync
