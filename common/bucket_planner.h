#ifndef WSYNC_COMMON_BUCKET_PLANNER_H_
#define WSYNC_COMMON_BUCKET_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"

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
};

// Groups tensors into buckets that fit a slot, keeping their order. Inside a bucket tensors lie
// back to back from offset 0 (the flattened layout engines rebuild with byte-offset views), so when
// a tensor's offset would not be a multiple of its item size the bucket is closed early rather than
// padded. A tensor larger than a slot is refused: no engine protocol wsync speaks can receive one
// tensor across two requests.
class BucketPlanner {
 public:
  explicit BucketPlanner(uint64_t slot_bytes) : slot_bytes_(slot_bytes) {}

  // Adds the next tensor. Returns the bucket that the tensor closed, if any.
  absl::StatusOr<std::optional<PlannedBucket>> Add(const TensorDesc& tensor);
  // Returns the last, partly filled bucket (if any tensor is pending).
  std::optional<PlannedBucket> Finish();

 private:
  uint64_t slot_bytes_;
  size_t next_index_ = 0;
  PlannedBucket open_;
};

// Plans a whole list up front, so an oversized tensor is reported before anything is sent.
absl::StatusOr<std::vector<PlannedBucket>> PlanBuckets(const std::vector<TensorDesc>& tensors,
                                                       uint64_t slot_bytes);

}  // namespace wsync

#endif  // WSYNC_COMMON_BUCKET_PLANNER_H_
