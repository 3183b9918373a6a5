#ifndef WSYNC_COMMON_BUCKET_PLANNER_H_
#define WSYNC_COMMON_BUCKET_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/manifest.h"

namespace wsync {

struct TensorDesc {
  std::string name;
  DType dtype = DType::kUint8;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

struct PlannedTensor {
  size_t index = 0;     // position in the caller's tensor sequence
  uint64_t offset = 0;  // byte offset inside the slot
};

struct PlannedBucket {
  std::vector<PlannedTensor> tensors;
  uint64_t bytes = 0;
  // One tensor larger than a slot, alone, bound for the oversize slot.
  bool oversize = false;
};

// What an engine protocol demands of a bucket beyond fitting a slot. A group's rules are the union
// of its engines' rules; wsyncd sends them in UpdateStarted and the client's planner obeys them, so
// a rule is met when buckets are planned instead of an update being refused at its first bad
// bucket.
struct BucketRules {
  // Every tensor of a bucket has the same dtype: receivers that rebuild a bucket as one typed
  // buffer (LMDeploy's flattened bucket, SGLang's older receiver) cannot mix dtypes.
  bool one_dtype = false;
  // When nonzero: a bucket closes right after the tensor whose addition makes it exceed this many
  // bytes (strictly greater; that tensor stays in it). vLLM's packed producer cuts chunks this way
  // and its receiver expects the same cut.
  uint64_t close_after_bytes = 0;

  // Union: one_dtype if either demands it; the smaller nonzero close_after_bytes.
  void Merge(const BucketRules& other);
  // E.g. "one dtype per bucket, close after 64 MiB", or "none".
  std::string Describe() const;
  bool operator==(const BucketRules&) const = default;
};

// INVALID_ARGUMENT naming the first tensor that breaks a rule a single bucket can be checked
// against, so a receiver can refuse a bad bucket before any byte moves: one_dtype (a tensor whose
// dtype differs from the first's), and the half of close_after_bytes that one bucket shows (a
// tensor following the one that took the running total past the limit). Whether a bucket closed
// too early cannot be told from the bucket alone.
absl::Status CheckBucketRules(const BucketRules& rules, const BucketManifest& manifest);

// Groups tensors into buckets that fit a slot, keeping their order. Inside a bucket tensors lie
// back to back from offset 0 (the flattened layout engines rebuild with byte-offset views), so when
// a tensor's offset would not be a multiple of its item size the bucket is closed early rather than
// padded. No engine protocol wsync speaks can receive one tensor across two requests, so a tensor
// larger than a slot either travels alone in an oversize bucket (oversize_alone) or is refused.
// `rules` close buckets earlier still: before a tensor of another dtype (one_dtype), and right
// after the tensor that takes a bucket past close_after_bytes. Fitting a slot comes first, so
// close_after_bytes reproduces vLLM's chunk cut only while every bucket it cuts fits a slot
// (slot_bytes >= close_after_bytes + the largest tensor) and no alignment closes one earlier.
class BucketPlanner {
 public:
  explicit BucketPlanner(uint64_t slot_bytes, bool oversize_alone = false, BucketRules rules = {})
      : slot_bytes_(slot_bytes), oversize_alone_(oversize_alone), rules_(rules) {}

  // Adds the next tensor. Returns the buckets it completed, in order (an oversize tensor
  // completes the open bucket and its own).
  absl::StatusOr<std::vector<PlannedBucket>> Add(const TensorDesc& tensor);
  // Returns the last, partly filled bucket (if any tensor is pending).
  std::optional<PlannedBucket> Finish();
  const BucketRules& rules() const { return rules_; }

 private:
  uint64_t slot_bytes_;
  bool oversize_alone_;
  BucketRules rules_;
  size_t next_index_ = 0;
  PlannedBucket open_;
  DType open_dtype_ = DType::kUint8;  // of open_'s first tensor
};

// Plans a whole list up front, so an oversized tensor is reported before anything is sent.
absl::StatusOr<std::vector<PlannedBucket>> PlanBuckets(const std::vector<TensorDesc>& tensors,
                                                       uint64_t slot_bytes,
                                                       bool oversize_alone = false,
                                                       const BucketRules& rules = {});

}  // namespace wsync

#endif  // WSYNC_COMMON_BUCKET_PLANNER_H_
