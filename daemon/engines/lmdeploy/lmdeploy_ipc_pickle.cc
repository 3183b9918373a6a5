#include "daemon/engines/lmdeploy/lmdeploy_ipc_pickle.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "common/torch_ipc/pickle_writer.h"

namespace wsync {
namespace {

// LMDeploy: flat[start:end].reshape(shape), then .to(dtype) when the dtypes differ.
absl::Status CheckEntry(const FlattenedTensorMetadata& m, const CheckedMetadata& checked,
                        const CudaIpcTensor* flat, DType flat_dtype, uint64_t flat_numel) {
  const std::string where = absl::StrCat("metadata '", m.name, "'");
  if (checked.shape_numel != m.numel) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeText(m.shape),
                                                   " is not numel ", m.numel, " elements"));
  }
  if (flat == nullptr) return absl::OkStatus();  // checked against the tensor the worker cached
  WSYNC_RETURN_IF_ERROR(CheckMetadataRange(m, flat_numel));
  if (checked.dtype != flat_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype ", m.dtype, " differs from the flattened tensor's ",
                     flat->dtype, "; LMDeploy would cast the values, not view the bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LmdeployNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors) {
  return NamedTensorListPickle(tensors, WriteRebuildPair);
}

absl::StatusOr<std::string> LmdeployFlattenedBucketPickle(const LmdeployFlattenedBucket& bucket) {
  const CudaIpcTensor* flat =
      bucket.flattened_tensor.has_value() ? &*bucket.flattened_tensor : nullptr;
  DType flat_dtype = DType::kUint8;
  uint64_t flat_numel = 0;
  if (flat != nullptr) {
    WSYNC_RETURN_IF_ERROR(PrefixStatus("flattened tensor", ValidateCudaIpcTensor(*flat)));
    WSYNC_RETURN_IF_ERROR(CheckOneDimensional(*flat, "the flattened tensor"));
    if (bucket.metadata.empty()) {
      return absl::InvalidArgumentError(
          "a flattened tensor with no metadata: LMDeploy returns before caching it");
    }
    flat_dtype = *ParseDType(flat->dtype);
    flat_numel = static_cast<uint64_t>(flat->shape[0]);
  }
  WSYNC_RETURN_IF_ERROR(CheckIpcHandleSize("the event IPC handle", bucket.event_ipc_handle));
  for (const FlattenedTensorMetadata& m : bucket.metadata) {
    WSYNC_ASSIGN_OR_RETURN(const CheckedMetadata checked, CheckFlattenedTensorMetadata(m));
    WSYNC_RETURN_IF_ERROR(CheckEntry(m, checked, flat, flat_dtype, flat_numel));
  }
  PickleWriter out;
  out.EmptyDict();
  out.Mark();
  WSYNC_RETURN_IF_ERROR(out.Unicode("metadata"));
  out.EmptyList();
  if (!bucket.metadata.empty()) {
    out.Mark();
    for (const FlattenedTensorMetadata& m : bucket.metadata) {
      WSYNC_RETURN_IF_ERROR(WriteFlattenedTensorMetadata(m, kLmdeployMetadataModule, &out));
    }
    out.Appends();
  }
  if (flat != nullptr) {
    WSYNC_RETURN_IF_ERROR(out.Unicode("flattened_tensor"));
    WSYNC_RETURN_IF_ERROR(WriteRebuildPair(*flat, &out));
  }
  // A live view, never a clone: wsyncd's buffer persists, and a clone made at the first call of
  // a cycle would be stale for the calls after it (docs/engines/lmdeploy.md).
  WSYNC_RETURN_IF_ERROR(out.Unicode("require_clone"));
  out.Bool(false);
  WSYNC_RETURN_IF_ERROR(out.Unicode("event_ipc_handle"));
  WSYNC_RETURN_IF_ERROR(out.Bytes(bucket.event_ipc_handle));
  out.SetItems();
  return std::move(out).Finish();
}

}  // namespace wsync
