#include "common/bucket_planner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/manifest.h"
#include "common/status_macros.h"

namespace wsync {

absl::StatusOr<std::vector<PlannedBucket>> BucketPlanner::Add(const TensorDesc& tensor) {
  WSYNC_ASSIGN_OR_RETURN(uint64_t numel, NumElements(tensor.shape));
  if (numel * DTypeSize(tensor.dtype) != tensor.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "': ", numel,
                                                   " elements of ", DTypeName(tensor.dtype),
                                                   " are not ", tensor.bytes, " bytes"));
  }
  std::vector<PlannedBucket> done;
  if (tensor.bytes > slot_bytes_ && oversize_alone_) {
    if (!open_.tensors.empty()) done.push_back(std::exchange(open_, PlannedBucket{}));
    PlannedBucket alone;
    alone.tensors.push_back(PlannedTensor{next_index_++, 0});
    alone.bytes = tensor.bytes;
    alone.oversize = true;
    done.push_back(std::move(alone));
    return done;
  }
  if (tensor.bytes > slot_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name, "' is ", tensor.bytes, " bytes, larger than a slot (",
                     slot_bytes_, " bytes); start wsyncd with a larger --slot-bytes"));
  }
  const uint64_t item = DTypeSize(tensor.dtype);
  const bool misaligned = open_.bytes % item != 0;
  const bool overflows = open_.bytes + tensor.bytes > slot_bytes_;
  if (!open_.tensors.empty() && (misaligned || overflows)) {
    done.push_back(std::exchange(open_, PlannedBucket{}));
  }
  open_.tensors.push_back(PlannedTensor{next_index_++, open_.bytes});
  open_.bytes += tensor.bytes;
  return done;
}

std::optional<PlannedBucket> BucketPlanner::Finish() {
  if (open_.tensors.empty()) return std::nullopt;
  PlannedBucket last = std::move(open_);
  open_ = PlannedBucket{};
  return last;
}

absl::StatusOr<std::vector<PlannedBucket>> PlanBuckets(const std::vector<TensorDesc>& tensors,
                                                       uint64_t slot_bytes, bool oversize_alone) {
  BucketPlanner planner(slot_bytes, oversize_alone);
  std::vector<PlannedBucket> buckets;
  for (const TensorDesc& t : tensors) {
    WSYNC_ASSIGN_OR_RETURN(std::vector<PlannedBucket> done, planner.Add(t));
    for (PlannedBucket& b : done) buckets.push_back(std::move(b));
  }
  if (auto last = planner.Finish()) buckets.push_back(std::move(*last));
  return buckets;
}

}  // namespace wsync
