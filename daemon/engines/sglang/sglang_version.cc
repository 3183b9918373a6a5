#include "daemon/engines/sglang/sglang_version.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::StatusOr<SglangIpcVariant> SglangIpcVariantFor(const SglangVersion& version,
                                                     BucketFormat format) {
  if (!version.AtLeast(0, 5, 1)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SGLang ", version.Described(),
        " is older than the first release wsyncd knows to serve colocated (CUDA IPC) updates "
        "(per-rank payloads on POST /update_weights_from_tensor and GPUs named by UUID); wsyncd "
        "needs SGLang >= ",
        kSglangMinIpcVersion));
  }
  if (format == BucketFormat::kPerTensor) {
    return SglangIpcVariant{"ipc per-tensor", BucketFormat::kPerTensor};
  }
  if (!version.AtLeast(0, 5, 6)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SGLang ", version.Described(),
        " reads a flattened_bucket as one typed tensor of a single dtype (before PR #13413); "
        "wsyncd's flattened IPC payload is uint8 bytes of mixed dtypes and needs SGLang >= ",
        kSglangMinUint8FlattenedVersion,
        "; create the group with --load-format per_tensor, or upgrade the engine"));
  }
  return SglangIpcVariant{"ipc uint8-flattened", BucketFormat::kFlattened};
}

absl::StatusOr<SglangIpcVariant> SglangIpcRouteVariantFor(const SglangVersion& version,
                                                          bool route_documented) {
  // A route gate: a pre-release of 0.5.5 or later whose documents list the route has it.
  const bool served = route_documented && version.ReleaseAtLeast(0, 5, 5);
  if (!version.AtLeast(0, 5, 5) && !served) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SGLang ", version.Described(),
        " may predate POST /update_weights_from_ipc (the map-once route, PR #11755); wsyncd "
        "needs SGLang >= ",
        kSglangMinIpcRouteVersion,
        " for ipc_route \"ipc\"; use the tensor route (the default), or upgrade the engine"));
  }
  return SglangIpcVariant{"ipc stream (map once)", BucketFormat::kFlattened};
}

}  // namespace wsync
