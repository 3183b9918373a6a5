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

namespace wsync {
namespace {

using ::testing::HasSubstr;

BucketManifest Manifest(std::initializer_list<std::pair<DType, uint64_t>> tensors) {
  BucketManifest m;
  uint64_t at = 0;
  int i = 0;
  for (const auto& [dtype, elements] : tensors) {
    const uint64_t bytes = elements * DTypeSize(dtype);
    m.tensors.push_back(
        TensorEntry{"t" + std::to_string(i++), dtype, {static_cast<int64_t>(elements)}, at, bytes});
    at += bytes;
  }
  return m;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// `base` with `fraction` of each tensor's elements changed (one byte of each, at random, so
// every lane of a word is tried), and how many changed in all.
std::vector<uint8_t> Changed(const BucketManifest& m, const std::vector<uint8_t>& base,
                             double fraction, uint32_t seed, uint64_t* changed = nullptr) {
  std::vector<uint8_t> next = base;
  std::mt19937 rng(seed);
  for (const TensorEntry& t : m.tensors) {
    const size_t width = DTypeSize(t.dtype);
    const uint64_t n = t.length / width;
    std::vector<uint64_t> order(n);
    for (uint64_t i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const auto k = static_cast<uint64_t>(fraction * static_cast<double>(n) + 0.5);
    for (uint64_t j = 0; j < k; ++j) ++next[t.offset + order[j] * width + rng() % width];
    if (changed != nullptr) *changed += k;
  }
  return next;
}

TEST(BucketDelta, EveryDensityAndDtypeDecodesToTheExactBytes) {
  // Odd counts: every width's tail after its last whole eight bytes.
  const BucketManifest m = Manifest({{DType::kBfloat16, 20001},
                                     {DType::kFloat32, 5001},
                                     {DType::kInt8, 3001},
                                     {DType::kFloat64, 700},
                                     {DType::kBfloat16, 0},
                                     {DType::kBfloat16, 7}});
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
  const BucketManifest m = Manifest({{DType::kFloat32, 64}, {DType::kBfloat16, 100}});
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 9);
  const std::vector<uint8_t> next = Changed(m, base, 0.05, 10);
  const std::string good = *EncodeBucketDelta(m, base, next);
  std::vector<uint8_t> out(m.span_bytes());
  const auto decode = [&](const std::string& frame) {
    return DecodeBucketDelta(m, base, frame, absl::MakeSpan(out));
  };
  ASSERT_TRUE(decode(good).ok());
  // Tensor 0's header at 8: form, count, size; its payload (gaps) after.
  std::string wrong_magic = good;
  wrong_magic[0] = 'X';
  std::string wrong_count = good;
  wrong_count[4] = 3;
  std::string many = good;
  many[9] = 100;  // 100 changed of 64 elements
  std::string form = good;
  form[8] = 7;
  std::string far = good;
  far[25] = static_cast<char>(0x7F);  // tensor 0's first position: 127, past its 64 elements
  const struct {
    std::string frame;
    const char* named;
  } cases[] = {
      {wrong_magic, "does not start with \"WSD1\""},
      {wrong_count, "names 3 tensor(s); the bucket's manifest has 2"},
      {many, "100 changed elements of 64"},
      {form, "form 7"},
      {far, "lies past element 63"},
      {good.substr(0, good.size() - 1), "where"},
      {good.substr(0, 20), "ends in its header"},
      {good + "x", "1 byte(s) after its last tensor"},
  };
  for (const auto& c : cases) {
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
