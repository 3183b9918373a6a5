#include "common/manifest.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace wsync {

uint64_t BucketManifest::span_bytes() const {
  uint64_t end = 0;
  for (const TensorEntry& t : tensors) end = std::max(end, t.end());
  return end;
}

absl::StatusOr<uint64_t> NumElements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape [", absl::StrJoin(shape, ", "), "]"));
    }
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] overflows"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

absl::Status ValidateManifest(const BucketManifest& manifest, uint64_t slot_bytes) {
  if (manifest.tensors.empty()) {
    return absl::InvalidArgumentError("empty bucket: a bucket must name at least one tensor");
  }
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i < manifest.tensors.size(); ++i) {
    // Checked first: the errors below quote the shape.
    if (manifest.tensors[i].shape.size() > kMaxTensorDims) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " has ", manifest.tensors[i].shape.size(),
                       " dimensions; at most ", kMaxTensorDims, " are allowed"));
    }
  }
  for (const TensorEntry& t : manifest.tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError("tensor with an empty name");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    auto numel = NumElements(t.shape);
    if (!numel.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': ", numel.status().message()));
    }
    const uint64_t item = DTypeSize(t.dtype);
    if (*numel > std::numeric_limits<uint64_t>::max() / item || *numel * item != t.length) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': shape [", absl::StrJoin(t.shape, ", "), "] x ", item,
                       " bytes (", DTypeName(t.dtype), ") != length ", t.length));
    }
    if (t.offset > slot_bytes || t.length > slot_bytes - t.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': bytes [", t.offset, ", ", t.offset + t.length,
                       ") lie outside the slot of ", slot_bytes, " bytes"));
    }
    if (t.offset % item != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': offset ", t.offset,
                                                     " is not a multiple of its item size ", item));
    }
  }
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& t : manifest.tensors) {
    if (t.length > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->offset < by_offset[i - 1]->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors '", by_offset[i - 1]->name, "' [", by_offset[i - 1]->offset, ", ",
                       by_offset[i - 1]->end(), ") and '", by_offset[i]->name, "' [",
                       by_offset[i]->offset, ", ", by_offset[i]->end(), ") overlap"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFlattenedLayout(const BucketManifest& manifest) {
  uint64_t expect = 0;
  for (const TensorEntry& t : manifest.tensors) {
    if (t.offset != expect) {
      return absl::InvalidArgumentError(
          absl::StrCat("flattened bucket layout: tensor '", t.name, "' starts at ", t.offset,
                       " but the previous tensor ends at ", expect,
                       "; tensors must lie back to back in list order from offset 0"));
    }
    expect = t.end();
  }
  return absl::OkStatus();
}

}  // namespace wsync
