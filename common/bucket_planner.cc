#include "common/bucket_planner.h"

#include "absl/strings/str_cat.h"
#include "common/manifest.h"
#include "common/status_macros.h"

namespace wsync {

absl::StatusOr<std::optional<PlannedBucket>> BucketPlanner::Add(const TensorDesc& tensor) {
  WSYNC_ASSIGN_OR_RETURN(uint64_t numel, NumElements(tensor.shape));
  if (numel * DTypeSize(tensor.dtype) != tensor.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "': ", numel,
                                                   " elements of ", DTypeName(tensor.dtype),
                                                   " are not ", tensor.bytes, " bytes"));
  }
  if (tensor.bytes > slot_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name, "' is ", tensor.bytes, " bytes, larger than a slot (",
                     slot_bytes_, " bytes); start wsyncd with a larger --slot-bytes"));
  }
  std::optional<PlannedBucket> closed;
  const uint64_t item = DTypeSize(tensor.dtype);
  const bool misaligned = open_.bytes % item != 0;
  const bool overflows = open_.bytes + tensor.bytes > slot_bytes_;
  if (!open_.tensors.empty() && (misaligned || overflows)) {
    closed = std::move(open_);
    open_ = PlannedBucket{};
  }
  open_.tensors.push_back(PlannedTensor{next_index_++, open_.bytes});
  open_.bytes += tensor.bytes;
  return closed;
}

std::optional<PlannedBucket> BucketPlanner::Finish() {
  if (open_.tensors.empty()) return std::nullopt;
  PlannedBucket last = std::move(open_);
  open_ = PlannedBucket{};
  return last;
}

absl::StatusOr<std::vector<PlannedBucket>> PlanBuckets(const std::vector<TensorDesc>& tensors,
                                                       uint64_t slot_bytes) {
  BucketPlanner planner(slot_bytes);
  std::vector<PlannedBucket> buckets;
  for (const TensorDesc& t : tensors) {
    WSYNC_ASSIGN_OR_RETURN(std::optional<PlannedBucket> closed, planner.Add(t));
    if (closed) buckets.push_back(std::move(*closed));
  }
  if (auto last = planner.Finish()) buckets.push_back(std::move(*last));
  return buckets;
}

}  // namespace wsync
