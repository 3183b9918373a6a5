#ifndef WSYNC_COMMON_MANIFEST_H_
#define WSYNC_COMMON_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace wsync {

// One tensor of a bucket: where its bytes lie in the slot and how to view them.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kUint8;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t length = 0;

  uint64_t end() const { return offset + length; }
  bool operator==(const TensorEntry&) const = default;
};

struct BucketManifest {
  std::vector<TensorEntry> tensors;

  // Bytes from the slot's start to the end of the furthest tensor: the range that is checksummed
  // and broadcast.
  uint64_t span_bytes() const;
  bool operator==(const BucketManifest&) const = default;
};

// The most dimensions a tensor may have (torch's own limit is 64).
inline constexpr size_t kMaxTensorDims = 64;

// Product of dims, or an error for negative dims and overflow.
absl::StatusOr<uint64_t> NumElements(const std::vector<int64_t>& shape);

// Checks what every engine needs: a non-empty list, names unique and non-empty, every range inside
// the slot, shape x itemsize == length, offsets aligned to the item size, no two ranges
// overlapping.
absl::Status ValidateManifest(const BucketManifest& manifest, uint64_t slot_bytes);

// Flattened buckets (SGLang, LMDeploy) are the tensors' bytes back to back in list order from
// offset 0, with no gaps. ValidateManifest must pass first.
absl::Status ValidateFlattenedLayout(const BucketManifest& manifest);

}  // namespace wsync

#endif  // WSYNC_COMMON_MANIFEST_H_
