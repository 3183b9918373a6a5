#include "daemon/engines/sglang/sglang_ipc_pickle.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "common/torch_ipc/pickle_writer.h"

namespace wsync {
namespace {

// SGLang: flat[start:end].view(dtype).reshape(shape) (the old bucket: .reshape and a cast when
// the dtypes differ). Same dtype: the range is the tensor's elements. uint8 bucket: the range is
// its bytes, and view(dtype) needs them to start on a boundary of the dtype.
absl::Status CheckEntry(const FlattenedTensorMetadata& m, const CheckedMetadata& checked,
                        const CudaIpcTensor& flat, DType flat_dtype, uint64_t flat_numel) {
  const std::string where = absl::StrCat("metadata '", m.name, "'");
  WSYNC_RETURN_IF_ERROR(CheckMetadataRange(m, flat_numel));
  if (checked.dtype == flat_dtype) {
    if (checked.shape_numel != m.numel) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeText(m.shape),
                                                     " is not numel ", m.numel, " elements"));
    }
    return absl::OkStatus();
  }
  if (flat_dtype != DType::kUint8) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype ", m.dtype, " differs from the flattened tensor's ", flat.dtype,
        "; only a uint8 bucket carries other dtypes (old SGLang would cast, new would view)"));
  }
  const uint64_t item = DTypeSize(checked.dtype);
  if (m.numel % item != 0 || m.numel / item != checked.shape_numel) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeText(m.shape), " of ",
                                                   m.dtype, " is not ", m.numel, " bytes"));
  }
  // The range's byte position in the storage (torch's view(dtype) rule) and in the allocation
  // (where the engine's kernels read it), modulo the item size.
  const uint64_t in_storage = (flat.element_offset % item + m.start_idx % item) % item;
  const uint64_t in_allocation = (in_storage + flat.storage_offset_bytes % item) % item;
  if (in_storage != 0 || in_allocation != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": bytes at ", m.start_idx, " of the uint8 bucket (element ",
                     flat.element_offset, " of a storage at byte ", flat.storage_offset_bytes,
                     ") are not aligned to ", m.dtype, "'s ", item, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> SglangNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors) {
  return NamedTensorListPickle(tensors, WriteReducedTensor);
}

absl::StatusOr<std::string> SglangFlattenedBucketPickle(
    const CudaIpcTensor& flattened, absl::Span<const FlattenedTensorMetadata> metadata) {
  WSYNC_RETURN_IF_ERROR(PrefixStatus("flattened tensor", ValidateCudaIpcTensor(flattened)));
  WSYNC_RETURN_IF_ERROR(CheckOneDimensional(flattened, "the flattened tensor"));
  const DType flat_dtype = *ParseDType(flattened.dtype);
  const uint64_t flat_numel = static_cast<uint64_t>(flattened.shape[0]);
  for (const FlattenedTensorMetadata& m : metadata) {
    WSYNC_ASSIGN_OR_RETURN(const CheckedMetadata checked, CheckFlattenedTensorMetadata(m));
    WSYNC_RETURN_IF_ERROR(CheckEntry(m, checked, flattened, flat_dtype, flat_numel));
  }
  PickleWriter out;
  out.EmptyDict();
  out.Mark();
  WSYNC_RETURN_IF_ERROR(out.Unicode("flattened_tensor"));
  WSYNC_RETURN_IF_ERROR(WriteReducedTensor(flattened, &out));
  WSYNC_RETURN_IF_ERROR(out.Unicode("metadata"));
  out.EmptyList();
  if (!metadata.empty()) {
    out.Mark();
    for (const FlattenedTensorMetadata& m : metadata) {
      WSYNC_RETURN_IF_ERROR(WriteFlattenedTensorMetadata(m, kSglangMetadataModule, &out));
    }
    out.Appends();
  }
  out.SetItems();
  return std::move(out).Finish();
}

}  // namespace wsync
