// ReadRelayBucket: what a downstream checks of a bucket frame before it receives a byte of it.
#include "daemon/relay/relay_frames.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

v1::RelayBucket Bucket(
    std::initializer_list<std::tuple<const char*, const char*, int64_t, uint64_t, uint64_t>>
        tensors) {
  v1::RelayBucket b;
  b.set_index(4);
  for (const auto& [name, dtype, elements, offset, length] : tensors) {
    v1::TensorSpec* t = b.add_tensors();
    t->set_name(name);
    t->set_dtype(dtype);
    t->add_shape(elements);
    t->set_offset(offset);
    t->set_length(length);
  }
  return b;
}

TEST(ReadRelayBucket, AcceptsABucketThatFitsTheSlot) {
  absl::StatusOr<BucketManifest> m =
      ReadRelayBucket(Bucket({{"a", "float32", 16, 0, 64}, {"b", "bfloat16", 8, 64, 16}}), 4096);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tensors.size(), 2u);
  EXPECT_EQ(m->span_bytes(), 80u);
  EXPECT_EQ(m->tensors[1].dtype, DType::kBfloat16);
}

TEST(ReadRelayBucket, RefusesSizesOffsetsAndDtypesThatDoNotFitNamingTheBucket) {
  const struct {
    v1::RelayBucket bucket;
    const char* named;
  } cases[] = {
      {Bucket({{"w", "uint8", 16, 4090, 16}}), "4096 bytes"},
      {Bucket({{"w", "uint8", 16, UINT64_MAX - 8, 16}}), "4096 bytes"},
      {Bucket({{"a", "uint8", 16, 0, 16}, {"b", "uint8", 16, 8, 16}}), "overlap"},
      {Bucket({{"a", "float7", 4, 0, 4}}), "float7"},
      {Bucket({{"a", "float32", 4, 0, 15}}), "a"},
      {Bucket({}), "relayed bucket 4"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<BucketManifest> m = ReadRelayBucket(c.bucket, 4096);
    ASSERT_FALSE(m.ok()) << c.bucket.DebugString();
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("relayed bucket 4 is refused"));
    EXPECT_THAT(m.status().message(), HasSubstr(c.named)) << m.status();
  }
}

}  // namespace
}  // namespace wsync
