#include "common/bucket_planner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

// Whole GiB, MiB or KiB when the size is one, else bytes: chunk sizes are usually round.
std::string SizeText(uint64_t bytes) {
  constexpr uint64_t kKiB = 1ull << 10, kMiB = 1ull << 20, kGiB = 1ull << 30;
  if (bytes % kGiB == 0) return absl::StrCat(bytes / kGiB, " GiB");
  if (bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, " MiB");
  if (bytes % kKiB == 0) return absl::StrCat(bytes / kKiB, " KiB");
  return absl::StrCat(bytes, bytes == 1 ? " byte" : " bytes");
}

}  // namespace

void BucketRules::Merge(const BucketRules& other) {
  one_dtype = one_dtype || other.one_dtype;
  // The smaller chunk: a group's planner can follow one cut, and a bucket cut at the smaller size
  // is the one no engine of the group finds too large.
  if (other.close_after_bytes != 0 &&
      (close_after_bytes == 0 || other.close_after_bytes < close_after_bytes)) {
    close_after_bytes = other.close_after_bytes;
  }
}

std::string BucketRules::Describe() const {
  std::vector<std::string> parts;
  if (one_dtype) parts.push_back("one dtype per bucket");
  if (close_after_bytes != 0) {
    parts.push_back(absl::StrCat("close after ", SizeText(close_after_bytes)));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

absl::Status CheckBucketRules(const BucketRules& rules, const BucketManifest& manifest) {
  if (manifest.tensors.empty()) return absl::OkStatus();
  const TensorEntry& first = manifest.tensors.front();
  uint64_t running = 0;  // bytes of the tensors before the current one, as vLLM's producer counts
  for (size_t i = 0; i < manifest.tensors.size(); ++i) {
    const TensorEntry& t = manifest.tensors[i];
    if (rules.one_dtype && t.dtype != first.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is ", DTypeName(t.dtype),
                       " but the bucket's first tensor '", first.name, "' is ",
                       DTypeName(first.dtype), "; the group's engines need one dtype per bucket"));
    }
    if (rules.close_after_bytes != 0 && running > rules.close_after_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' follows '", manifest.tensors[i - 1].name,
          "', which took the bucket to ", running, " bytes, past the group's chunk of ",
          rules.close_after_bytes, " bytes; the group's engines need the bucket closed there"));
    }
    running += t.length;
  }
  return absl::OkStatus();
}

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
  const bool other_dtype = rules_.one_dtype && tensor.dtype != open_dtype_;
  if (!open_.tensors.empty() && (misaligned || overflows || other_dtype)) {
    done.push_back(std::exchange(open_, PlannedBucket{}));
  }
  if (open_.tensors.empty()) open_dtype_ = tensor.dtype;
  open_.tensors.push_back(PlannedTensor{next_index_++, open_.bytes});
  open_.bytes += tensor.bytes;
  // The tensor that takes the bucket past the chunk size stays in it and ends it.
  if (rules_.close_after_bytes != 0 && open_.bytes > rules_.close_after_bytes) {
    done.push_back(std::exchange(open_, PlannedBucket{}));
  }
  return done;
}

std::optional<PlannedBucket> BucketPlanner::Finish() {
  if (open_.tensors.empty()) return std::nullopt;
  PlannedBucket last = std::move(open_);
  open_ = PlannedBucket{};
  return last;
}

absl::StatusOr<std::vector<PlannedBucket>> PlanBuckets(const std::vector<TensorDesc>& tensors,
                                                       uint64_t slot_bytes, bool oversize_alone,
                                                       const BucketRules& rules) {
  BucketPlanner planner(slot_bytes, oversize_alone, rules);
  std::vector<PlannedBucket> buckets;
  for (const TensorDesc& t : tensors) {
    WSYNC_ASSIGN_OR_RETURN(std::vector<PlannedBucket> done, planner.Add(t));
    for (PlannedBucket& b : done) buckets.push_back(std::move(b));
  }
  if (auto last = planner.Finish()) buckets.push_back(std::move(*last));
  return buckets;
}

}  // namespace wsync
