#include "common/torch_ipc/torch_ipc_pickle.h"

#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/manifest.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr absl::string_view kMetadataClass = "FlattenedTensorMetadata";

bool IsTorchModule(absl::string_view module) {
  return module == "torch" || absl::StartsWith(module, "torch.");
}

// The one gate every GLOBAL of this file goes through, so nothing outside the documented set can
// reach a pickle whatever the inputs (the list is the header's). The metadata class's module is
// the engine's, named by its payload code; torch's modules never hold it.
bool IsAllowedGlobal(absl::string_view module, absl::string_view name) {
  if (module == "torch.multiprocessing.reductions") return name == "rebuild_cuda_tensor";
  if (module == "torch.storage") return name == "TypedStorage";
  if (module == "torch") return name == "Tensor" || name == "Size" || ParseDType(name).ok();
  return !IsTorchModule(module) && name == kMetadataClass;
}

absl::Status AllowedGlobal(absl::string_view module, absl::string_view name, PickleWriter* out) {
  if (!IsAllowedGlobal(module, name)) {
    return absl::InternalError(
        absl::StrCat("GLOBAL ", module, ".", name, " is not one a torch IPC pickle may carry"));
  }
  return out->Global(module, name);
}

std::string Quoted(absl::string_view what, absl::string_view name) {
  return absl::StrCat(what, " '", name, "'");
}

// The element count of a shape that torch can hold: dims >= 0 and every product within int64.
absl::StatusOr<uint64_t> TorchNumel(absl::Span<const int64_t> shape) {
  WSYNC_RETURN_IF_ERROR(ContiguousStrides(shape).status());
  return NumElements(std::vector<int64_t>(shape.begin(), shape.end()));
}

absl::Status CheckName(absl::string_view what, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " with an empty name"));
  return absl::OkStatus();
}

}  // namespace

absl::Status PrefixStatus(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckIpcHandleSize(absl::string_view what, absl::string_view bytes) {
  if (bytes.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", bytes.size(), " bytes, not ", kCudaIpcHandleBytes));
  }
  return absl::OkStatus();
}

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

absl::StatusOr<CheckedMetadata> CheckFlattenedTensorMetadata(const FlattenedTensorMetadata& m) {
  if (m.name.empty()) return absl::InvalidArgumentError("metadata entry with an empty name");
  const std::string where = Quoted("metadata", m.name);
  auto dtype = ParseDType(m.dtype);
  if (!dtype.ok()) return PrefixStatus(where, dtype.status());
  auto numel = TorchNumel(m.shape);
  if (!numel.ok()) return PrefixStatus(where, numel.status());
  if (m.end_idx < m.start_idx || m.end_idx - m.start_idx != m.numel) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": range [", m.start_idx, ", ", m.end_idx,
                                                   ") does not hold numel ", m.numel));
  }
  return CheckedMetadata{*dtype, *numel};
}

absl::Status CheckMetadataRange(const FlattenedTensorMetadata& m, uint64_t flat_numel) {
  if (m.end_idx > flat_numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted("metadata", m.name), ": range [", m.start_idx, ", ", m.end_idx,
                     ") ends past the flattened tensor's ", flat_numel, " elements"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NamedTensorListPickle(absl::Span<const NamedCudaTensor> tensors,
                                                  TensorWriter write) {
  PickleWriter out;
  out.EmptyList();
  if (!tensors.empty()) {
    out.Mark();
    for (const NamedCudaTensor& t : tensors) {
      WSYNC_RETURN_IF_ERROR(CheckName("tensor", t.name));
      WSYNC_RETURN_IF_ERROR(out.Unicode(t.name));
      WSYNC_RETURN_IF_ERROR(PrefixStatus(Quoted("tensor", t.name), write(t.tensor, &out)));
      out.Tuple2();
    }
    out.Appends();
  }
  return std::move(out).Finish();
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
  WSYNC_RETURN_IF_ERROR(CheckIpcHandleSize("the IPC memory handle", t.ipc_handle));
  WSYNC_RETURN_IF_ERROR(CheckIpcHandleSize("the IPC event handle", t.event_handle));
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

absl::Status WriteFlattenedTensorMetadata(const FlattenedTensorMetadata& m,
                                          absl::string_view metadata_module, PickleWriter* out) {
  WSYNC_ASSIGN_OR_RETURN(const CheckedMetadata checked, CheckFlattenedTensorMetadata(m));
  WSYNC_RETURN_IF_ERROR(AllowedGlobal(metadata_module, kMetadataClass, out));
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
    if (!dtype.ok()) return PrefixStatus(where, dtype.status());
    auto numel = TorchNumel(t.shape);
    if (!numel.ok()) return PrefixStatus(where, numel.status());
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
