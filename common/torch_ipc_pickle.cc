#include "common/torch_ipc_pickle.h"

#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/manifest.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr absl::string_view kMetadataClass = "FlattenedTensorMetadata";

// The one gate every GLOBAL of this file goes through, so nothing outside the documented set can
// reach a pickle whatever the inputs (the list is the header's).
bool IsAllowedGlobal(absl::string_view module, absl::string_view name) {
  if (module == "torch.multiprocessing.reductions") return name == "rebuild_cuda_tensor";
  if (module == "torch.storage") return name == "TypedStorage";
  if (module == "torch") return name == "Tensor" || name == "Size" || ParseDType(name).ok();
  if (module == MetadataModuleName(MetadataModule::kSglangTensorBucket) ||
      module == MetadataModuleName(MetadataModule::kLmdeployUtils)) {
    return name == kMetadataClass;
  }
  return false;
}

absl::Status AllowedGlobal(absl::string_view module, absl::string_view name, PickleWriter* out) {
  if (!IsAllowedGlobal(module, name)) {
    return absl::InternalError(
        absl::StrCat("GLOBAL ", module, ".", name, " is not one a torch IPC pickle may carry"));
  }
  return out->Global(module, name);
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

std::string Quoted(absl::string_view what, absl::string_view name) {
  return absl::StrCat(what, " '", name, "'");
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The element count of a shape that torch can hold: dims >= 0 and every product within int64.
absl::StatusOr<uint64_t> TorchNumel(absl::Span<const int64_t> shape) {
  WSYNC_RETURN_IF_ERROR(ContiguousStrides(shape).status());
  return NumElements(std::vector<int64_t>(shape.begin(), shape.end()));
}

absl::Status CheckHandle(absl::string_view what, absl::string_view bytes) {
  if (bytes.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", bytes.size(), " bytes, not ", kCudaIpcHandleBytes));
  }
  return absl::OkStatus();
}

// A flattened or buffer tensor is sliced by the receiver with flat[start:end]: it must be 1-D.
absl::Status CheckOneDimensional(const CudaIpcTensor& t, absl::string_view what) {
  if (t.shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be 1-D, not of shape ", ShapeText(t.shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckUint8Buffer(const CudaIpcTensor& t, absl::string_view what) {
  WSYNC_RETURN_IF_ERROR(CheckOneDimensional(t, what));
  if (t.dtype != DTypeName(DType::kUint8)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a uint8 view of the buffer, not ", t.dtype));
  }
  return absl::OkStatus();
}

struct CheckedMetadata {
  DType dtype;
  uint64_t shape_numel;
};

// What holds for an entry whatever the bucket: a name, a known dtype, a sound shape and a range
// whose length is numel.
absl::StatusOr<CheckedMetadata> CheckMetadataEntry(const FlattenedTensorMetadata& m) {
  if (m.name.empty()) return absl::InvalidArgumentError("metadata entry with an empty name");
  const std::string where = Quoted("metadata", m.name);
  auto dtype = ParseDType(m.dtype);
  if (!dtype.ok()) return Prefixed(where, dtype.status());
  auto numel = TorchNumel(m.shape);
  if (!numel.ok()) return Prefixed(where, numel.status());
  if (m.end_idx < m.start_idx || m.end_idx - m.start_idx != m.numel) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": range [", m.start_idx, ", ", m.end_idx,
                                                   ") does not hold numel ", m.numel));
  }
  return CheckedMetadata{*dtype, *numel};
}

// Checks an entry against the flattened tensor it indexes: its range within the tensor's
// elements.
absl::Status CheckRangeInside(const FlattenedTensorMetadata& m, uint64_t flat_numel) {
  if (m.end_idx > flat_numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted("metadata", m.name), ": range [", m.start_idx, ", ", m.end_idx,
                     ") ends past the flattened tensor's ", flat_numel, " elements"));
  }
  return absl::OkStatus();
}

// SGLang: flat[start:end].view(dtype).reshape(shape) (the old bucket: .reshape and a cast when
// the dtypes differ). Same dtype: the range is the tensor's elements. uint8 bucket: the range is
// its bytes, and view(dtype) needs them to start on a boundary of the dtype.
absl::Status CheckSglangEntry(const FlattenedTensorMetadata& m, const CheckedMetadata& checked,
                              const CudaIpcTensor& flat, DType flat_dtype, uint64_t flat_numel) {
  const std::string where = Quoted("metadata", m.name);
  WSYNC_RETURN_IF_ERROR(CheckRangeInside(m, flat_numel));
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

// LMDeploy: flat[start:end].reshape(shape), then .to(dtype) when the dtypes differ.
absl::Status CheckLmdeployEntry(const FlattenedTensorMetadata& m, const CheckedMetadata& checked,
                                const CudaIpcTensor* flat, DType flat_dtype, uint64_t flat_numel) {
  const std::string where = Quoted("metadata", m.name);
  if (checked.shape_numel != m.numel) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeText(m.shape),
                                                   " is not numel ", m.numel, " elements"));
  }
  if (flat == nullptr) return absl::OkStatus();  // checked against the tensor the worker cached
  WSYNC_RETURN_IF_ERROR(CheckRangeInside(m, flat_numel));
  if (checked.dtype != flat_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype ", m.dtype, " differs from the flattened tensor's ",
                     flat->dtype, "; LMDeploy would cast the values, not view the bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckName(absl::string_view what, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " with an empty name"));
  return absl::OkStatus();
}

// A dict keyed by GPU UUID: each key once, none empty (the worker looks its own up).
absl::Status CheckGpuKeys(absl::Span<const TensorOnGpu> entries, absl::string_view what) {
  if (entries.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " names no GPU"));
  absl::flat_hash_set<absl::string_view> seen;
  for (const TensorOnGpu& e : entries) {
    if (e.gpu_uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": an empty GPU UUID"));
    }
    if (!seen.insert(e.gpu_uuid).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GPU UUID '", e.gpu_uuid, "' given twice"));
    }
  }
  return absl::OkStatus();
}

// {uuid: entry, ...}: EMPTY_DICT MARK (key value)... SETITEMS.
absl::Status WriteGpuDict(absl::Span<const TensorOnGpu> entries, VllmEntryForm form,
                          PickleWriter* out) {
  out->EmptyDict();
  out->Mark();
  for (const TensorOnGpu& e : entries) {
    WSYNC_RETURN_IF_ERROR(out->Unicode(e.gpu_uuid));
    const absl::Status written = form == VllmEntryForm::kFuncArgs ? WriteRebuildPair(e.tensor, out)
                                                                  : WriteRebuildArgs(e.tensor, out);
    WSYNC_RETURN_IF_ERROR(Prefixed(absl::StrCat("GPU '", e.gpu_uuid, "'"), written));
  }
  out->SetItems();
  return absl::OkStatus();
}

// list[(name, tensor)] with each tensor as `write` puts it.
template <typename WriteTensor>
absl::StatusOr<std::string> NamedTensorList(absl::Span<const NamedCudaTensor> tensors,
                                            WriteTensor write) {
  PickleWriter out;
  out.EmptyList();
  if (!tensors.empty()) {
    out.Mark();
    for (const NamedCudaTensor& t : tensors) {
      WSYNC_RETURN_IF_ERROR(CheckName("tensor", t.name));
      WSYNC_RETURN_IF_ERROR(out.Unicode(t.name));
      WSYNC_RETURN_IF_ERROR(Prefixed(Quoted("tensor", t.name), write(t.tensor, &out)));
      out.Tuple2();
    }
    out.Appends();
  }
  return std::move(out).Finish();
}

}  // namespace

absl::string_view MetadataModuleName(MetadataModule module) {
  switch (module) {
    case MetadataModule::kSglangTensorBucket:
      return "sglang.srt.weight_sync.tensor_bucket";
    case MetadataModule::kLmdeployUtils:
      return "lmdeploy.utils";
  }
  return "";
}

absl::StatusOr<std::vector<int64_t>> ContiguousStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  uint64_t running = 1;  // product of the dims after i (zero dims counted as 1), then of all
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeText(shape)));
    }
    strides[i] = static_cast<int64_t>(running);
    const uint64_t dim = shape[i] == 0 ? 1 : static_cast<uint64_t>(shape[i]);
    if (running > kMaxInt64 / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeText(shape), " has more elements than int64 holds"));
    }
    running *= dim;
  }
  return strides;
}

absl::Status ValidateCudaIpcTensor(const CudaIpcTensor& t) {
  WSYNC_ASSIGN_OR_RETURN(const DType dtype, ParseDType(t.dtype));
  WSYNC_ASSIGN_OR_RETURN(const uint64_t numel, TorchNumel(t.shape));
  WSYNC_RETURN_IF_ERROR(CheckHandle("the IPC memory handle", t.ipc_handle));
  WSYNC_RETURN_IF_ERROR(CheckHandle("the IPC event handle", t.event_handle));
  if (const int* index = std::get_if<int>(&t.device); index != nullptr && *index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device index ", *index, " is negative"));
  }
  if (const std::string* uuid = std::get_if<std::string>(&t.device);
      uuid != nullptr && uuid->empty()) {
    return absl::InvalidArgumentError("empty GPU UUID as the device");
  }
  const uint64_t item = DTypeSize(dtype);
  if (t.storage_size_bytes > kMaxInt64 || t.storage_offset_bytes > kMaxInt64) {
    return absl::InvalidArgumentError(absl::StrCat("storage of ", t.storage_size_bytes,
                                                   " bytes at byte ", t.storage_offset_bytes,
                                                   " is past int64"));
  }
  if (t.storage_size_bytes % item != 0 || t.storage_offset_bytes % item != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("storage of ", t.storage_size_bytes, " bytes at byte ", t.storage_offset_bytes,
                     " of the allocation is not aligned to ", t.dtype, "'s ", item, " bytes"));
  }
  const uint64_t storage_elements = t.storage_size_bytes / item;
  if (t.element_offset > storage_elements || numel > storage_elements - t.element_offset) {
    return absl::InvalidArgumentError(absl::StrCat("view of ", numel, " elements at element ",
                                                   t.element_offset, " of ", t.dtype,
                                                   " ends past the storage's ", storage_elements,
                                                   " elements (", t.storage_size_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status WriteRebuildFunc(PickleWriter* out) {
  return AllowedGlobal("torch.multiprocessing.reductions", "rebuild_cuda_tensor", out);
}

absl::Status WriteTorchSize(absl::Span<const int64_t> dims, PickleWriter* out) {
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative dimension in ", ShapeText(dims)));
    }
  }
  WSYNC_RETURN_IF_ERROR(AllowedGlobal("torch", "Size", out));
  out->IntTuple(dims);
  out->Tuple1();
  out->Reduce();
  return absl::OkStatus();
}

absl::Status WriteTorchDtype(DType dtype, PickleWriter* out) {
  return AllowedGlobal("torch", DTypeName(dtype), out);
}

absl::Status WriteRebuildArgs(const CudaIpcTensor& t, PickleWriter* out) {
  WSYNC_RETURN_IF_ERROR(ValidateCudaIpcTensor(t));
  const DType dtype = *ParseDType(t.dtype);
  const std::vector<int64_t> strides = *ContiguousStrides(t.shape);
  out->Mark();
  WSYNC_RETURN_IF_ERROR(AllowedGlobal("torch", "Tensor", out));                // 0 tensor_cls
  WSYNC_RETURN_IF_ERROR(WriteTorchSize(t.shape, out));                         // 1 tensor_size
  out->IntTuple(strides);                                                      // 2 tensor_stride
  out->Uint(t.element_offset);                                                 // 3 tensor_offset
  WSYNC_RETURN_IF_ERROR(AllowedGlobal("torch.storage", "TypedStorage", out));  // 4 storage_cls
  WSYNC_RETURN_IF_ERROR(WriteTorchDtype(dtype, out));                          // 5 dtype
  if (const int* index = std::get_if<int>(&t.device)) {                        // 6 device
    out->Int(*index);
  } else {
    WSYNC_RETURN_IF_ERROR(out->Unicode(std::get<std::string>(t.device)));
  }
  // 7: the raw handle. torch writes b"\x02c" + handle, but the version byte is what torch 2.13
  // changed and older consumers refuse; every version accepts the raw 64 bytes
  // (docs/engines/torch-ipc.md).
  WSYNC_RETURN_IF_ERROR(out->Bytes(t.ipc_handle));
  out->Uint(t.storage_size_bytes);                        // 8 storage_size_bytes
  out->Uint(t.storage_offset_bytes);                      // 9 storage_offset_bytes
  out->Bool(false);                                       // 10 requires_grad
  WSYNC_RETURN_IF_ERROR(out->Bytes(t.ref_counter_name));  // 11 ref_counter_handle: bytes
  out->Int(0);                                            // 12 ref_counter_offset
  WSYNC_RETURN_IF_ERROR(out->Bytes(t.event_handle));      // 13 event_handle
  out->Bool(t.event_sync_required);                       // 14: an exact bool, not an int
  out->Tuple();
  return absl::OkStatus();
}

absl::Status WriteReducedTensor(const CudaIpcTensor& t, PickleWriter* out) {
  WSYNC_RETURN_IF_ERROR(WriteRebuildFunc(out));
  WSYNC_RETURN_IF_ERROR(WriteRebuildArgs(t, out));
  out->Reduce();
  return absl::OkStatus();
}

absl::Status WriteRebuildPair(const CudaIpcTensor& t, PickleWriter* out) {
  WSYNC_RETURN_IF_ERROR(WriteRebuildFunc(out));
  WSYNC_RETURN_IF_ERROR(WriteRebuildArgs(t, out));
  out->Tuple2();
  return absl::OkStatus();
}

absl::Status WriteFlattenedTensorMetadata(const FlattenedTensorMetadata& m, MetadataModule module,
                                          PickleWriter* out) {
  WSYNC_ASSIGN_OR_RETURN(const CheckedMetadata checked, CheckMetadataEntry(m));
  WSYNC_RETURN_IF_ERROR(AllowedGlobal(MetadataModuleName(module), kMetadataClass, out));
  out->EmptyTuple();
  out->NewObj();
  out->EmptyDict();
  out->Mark();
  WSYNC_RETURN_IF_ERROR(out->Unicode("name"));
  WSYNC_RETURN_IF_ERROR(out->Unicode(m.name));
  WSYNC_RETURN_IF_ERROR(out->Unicode("shape"));
  WSYNC_RETURN_IF_ERROR(WriteTorchSize(m.shape, out));
  WSYNC_RETURN_IF_ERROR(out->Unicode("dtype"));
  WSYNC_RETURN_IF_ERROR(WriteTorchDtype(checked.dtype, out));
  WSYNC_RETURN_IF_ERROR(out->Unicode("start_idx"));
  out->Uint(m.start_idx);
  WSYNC_RETURN_IF_ERROR(out->Unicode("end_idx"));
  out->Uint(m.end_idx);
  WSYNC_RETURN_IF_ERROR(out->Unicode("numel"));
  out->Uint(m.numel);
  out->SetItems();
  out->Build();
  return absl::OkStatus();
}

absl::StatusOr<std::string> SglangNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors) {
  return NamedTensorList(tensors, WriteReducedTensor);
}

absl::StatusOr<std::string> SglangFlattenedBucketPickle(
    const CudaIpcTensor& flattened, absl::Span<const FlattenedTensorMetadata> metadata) {
  WSYNC_RETURN_IF_ERROR(Prefixed("flattened tensor", ValidateCudaIpcTensor(flattened)));
  WSYNC_RETURN_IF_ERROR(CheckOneDimensional(flattened, "the flattened tensor"));
  const DType flat_dtype = *ParseDType(flattened.dtype);
  const uint64_t flat_numel = static_cast<uint64_t>(flattened.shape[0]);
  for (const FlattenedTensorMetadata& m : metadata) {
    WSYNC_ASSIGN_OR_RETURN(const CheckedMetadata checked, CheckMetadataEntry(m));
    WSYNC_RETURN_IF_ERROR(CheckSglangEntry(m, checked, flattened, flat_dtype, flat_numel));
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
      WSYNC_RETURN_IF_ERROR(
          WriteFlattenedTensorMetadata(m, MetadataModule::kSglangTensorBucket, &out));
    }
    out.Appends();
  }
  out.SetItems();
  return std::move(out).Finish();
}

absl::StatusOr<std::string> VllmIpcHandlesPickle(absl::Span<const std::vector<TensorOnGpu>> names,
                                                 VllmEntryForm form) {
  PickleWriter out;
  out.EmptyList();
  if (!names.empty()) {
    out.Mark();
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string what = absl::StrCat("name #", i);
      WSYNC_RETURN_IF_ERROR(CheckGpuKeys(names[i], what));
      WSYNC_RETURN_IF_ERROR(Prefixed(what, WriteGpuDict(names[i], form, &out)));
    }
    out.Appends();
  }
  return std::move(out).Finish();
}

absl::StatusOr<std::string> VllmPackedIpcHandlesPickle(absl::Span<const TensorOnGpu> chunk) {
  WSYNC_RETURN_IF_ERROR(CheckGpuKeys(chunk, "packed chunk"));
  for (const TensorOnGpu& e : chunk) {
    WSYNC_RETURN_IF_ERROR(CheckUint8Buffer(e.tensor, absl::StrCat("GPU '", e.gpu_uuid, "'")));
  }
  PickleWriter out;
  WSYNC_RETURN_IF_ERROR(WriteGpuDict(chunk, VllmEntryForm::kArgsOnly, &out));
  return std::move(out).Finish();
}

absl::StatusOr<std::string> LmdeployNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors) {
  return NamedTensorList(tensors, WriteRebuildPair);
}

absl::StatusOr<std::string> LmdeployFlattenedBucketPickle(const LmdeployFlattenedBucket& bucket) {
  const CudaIpcTensor* flat =
      bucket.flattened_tensor.has_value() ? &*bucket.flattened_tensor : nullptr;
  DType flat_dtype = DType::kUint8;
  uint64_t flat_numel = 0;
  if (flat != nullptr) {
    WSYNC_RETURN_IF_ERROR(Prefixed("flattened tensor", ValidateCudaIpcTensor(*flat)));
    WSYNC_RETURN_IF_ERROR(CheckOneDimensional(*flat, "the flattened tensor"));
    if (bucket.metadata.empty()) {
      return absl::InvalidArgumentError(
          "a flattened tensor with no metadata: LMDeploy returns before caching it");
    }
    flat_dtype = *ParseDType(flat->dtype);
    flat_numel = static_cast<uint64_t>(flat->shape[0]);
  }
  WSYNC_RETURN_IF_ERROR(CheckHandle("the event IPC handle", bucket.event_ipc_handle));
  for (const FlattenedTensorMetadata& m : bucket.metadata) {
    WSYNC_ASSIGN_OR_RETURN(const CheckedMetadata checked, CheckMetadataEntry(m));
    WSYNC_RETURN_IF_ERROR(CheckLmdeployEntry(m, checked, flat, flat_dtype, flat_numel));
  }
  PickleWriter out;
  out.EmptyDict();
  out.Mark();
  WSYNC_RETURN_IF_ERROR(out.Unicode("metadata"));
  out.EmptyList();
  if (!bucket.metadata.empty()) {
    out.Mark();
    for (const FlattenedTensorMetadata& m : bucket.metadata) {
      WSYNC_RETURN_IF_ERROR(WriteFlattenedTensorMetadata(m, MetadataModule::kLmdeployUtils, &out));
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

absl::StatusOr<std::string> CheckpointEngineBufferFrame(const CudaIpcTensor& buffer) {
  WSYNC_RETURN_IF_ERROR(CheckUint8Buffer(buffer, "the checkpoint-engine buffer"));
  PickleWriter out;
  WSYNC_RETURN_IF_ERROR(WriteRebuildPair(buffer, &out));
  return std::move(out).Finish();
}

absl::StatusOr<std::string> CheckpointEngineBucketFrame(
    absl::Span<const CheckpointEngineTensor> tensors, uint64_t buffer_bytes) {
  for (const CheckpointEngineTensor& t : tensors) {
    WSYNC_RETURN_IF_ERROR(CheckName("bucket tensor", t.name));
    const std::string where = Quoted("bucket tensor", t.name);
    auto dtype = ParseDType(t.dtype);
    if (!dtype.ok()) return Prefixed(where, dtype.status());
    auto numel = TorchNumel(t.shape);
    if (!numel.ok()) return Prefixed(where, numel.status());
    const uint64_t item = DTypeSize(*dtype);
    if (t.offset % item != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": byte offset ", t.offset,
                                                     " is not aligned to ", t.dtype, "'s ", item,
                                                     " bytes"));
    }
    if (t.offset > buffer_bytes || *numel > (buffer_bytes - t.offset) / item) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", *numel, " elements of ", t.dtype, " at byte ", t.offset,
                       " end past the buffer's ", buffer_bytes, " bytes"));
    }
  }
  PickleWriter out;
  out.EmptyList();
  if (!tensors.empty()) {
    out.Mark();
    for (const CheckpointEngineTensor& t : tensors) {
      out.EmptyDict();
      out.Mark();
      WSYNC_RETURN_IF_ERROR(out.Unicode("name"));
      WSYNC_RETURN_IF_ERROR(out.Unicode(t.name));
      WSYNC_RETURN_IF_ERROR(out.Unicode("shape"));
      WSYNC_RETURN_IF_ERROR(WriteTorchSize(t.shape, &out));
      WSYNC_RETURN_IF_ERROR(out.Unicode("dtype"));
      WSYNC_RETURN_IF_ERROR(WriteTorchDtype(*ParseDType(t.dtype), &out));
      WSYNC_RETURN_IF_ERROR(out.Unicode("offset"));
      out.Uint(t.offset);
      out.SetItems();
    }
    out.Appends();
  }
  return std::move(out).Finish();
}

std::string CheckpointEngineNoneFrame() {
  PickleWriter out;
  out.None();
  return std::move(out).Finish();
}

std::string CheckpointEngineAbortFrame(absl::string_view reason) {
  // ASCII only, so the text can never be refused as UTF-8 and the frame always goes out.
  std::string text;
  for (char c : reason.substr(0, 512)) {
    text.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  PickleWriter out;
  // A constant, valid pair: Global cannot fail on it.
  (void)out.Global("builtins", "RuntimeError");
  (void)out.Unicode(absl::StrCat("wsync aborted the update: ", text));
  out.Tuple1();
  out.Reduce();
  return std::move(out).Finish();
}

}  // namespace wsync
