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
  // One tensor larger than a slot, alone, bound for the oversize slot.
  bool oversize = false;
};

// Groups tensors into buckets that fit a slot, keeping their order. Inside a bucket tensors lie
// back to back from offset 0 (the flattened layout engines rebuild with byte-offset views), so when
// a tensor's offset would not be a multiple of its item size the bucket is closed early rather than
// padded. No engine protocol wsync speaks can receive one tensor across two requests, so a tensor
// larger than a slot either travels alone in an oversize bucket (oversize_alone) or is refused.
class BucketPlanner {
 public:
  explicit BucketPlanner(uint64_t slot_bytes, bool oversize_alone = false)
      : slot_bytes_(slot_bytes), oversize_alone_(oversize_alone) {}

  // Adds the next tensor. Returns the buckets it completed, in order (an oversize tensor
  // completes the open bucket and its own).
  absl::StatusOr<std::vector<PlannedBucket>> Add(const TensorDesc& tensor);
  // Returns the last, partly filled bucket (if any tensor is pending).
  std::optional<PlannedBucket> Finish();

 private:
  uint64_t slot_bytes_;
  bool oversize_alone_;
  size_t next_index_ = 0;
  PlannedBucket open_;
};

// Plans a whole list up front, so an oversized tensor is reported before anything is sent.
absl::StatusOr<std::vector<PlannedBucket>> PlanBuckets(const std::vector<TensorDesc>& tensors,
                                                       uint64_t slot_bytes,
                                                       bool oversize_alone = false);

}  // namespace wsync

#endif  // WSYNC_COMMON_BUCKET_PLANNER_H_
