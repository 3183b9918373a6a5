#ifndef WSYNC_COMMON_TORCH_IPC_TORCH_IPC_PICKLE_H_
#define WSYNC_COMMON_TORCH_IPC_TORCH_IPC_PICKLE_H_

// The pickles an engine's torch turns into CUDA tensors mapped onto wsyncd's buffers, written
// without torch (docs/engines/torch-ipc.md). A tensor is what torch.multiprocessing.reductions.
// reduce_tensor makes of a CUDA tensor: rebuild_cuda_tensor and its 15 arguments. This file is
// that encoding and the pieces every engine's container is made of; each engine kind writes its
// own container (its page in docs/engines) in its folder under daemon/engines, so that a new kind
// never edits this library.
//
// Only these GLOBALs are ever written, because SGLang's SafeUnpickler accepts exact
// (module, name) pairs and nothing else: torch.multiprocessing.reductions.rebuild_cuda_tensor,
// torch.Tensor, torch.Size, torch.storage.TypedStorage, torch.<dtype> for the dtypes of
// common/dtype.h, and FlattenedTensorMetadata under the module its engine's payload names. The
// one exception is CheckpointEngineAbortFrame, read by checkpoint-engine's plain unpickler.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/torch_ipc/pickle_writer.h"

namespace wsync {

// Size of a cudaIpcMemHandle_t and of a cudaIpcEventHandle_t.
inline constexpr size_t kCudaIpcHandleBytes = 64;

// Rebuild argument 6: the GPU the consumer maps the storage on. An index (for engines that replace
// it with their own device anyway) or the GPU's UUID as torch prints it
// (str(get_device_properties(d).uuid), no "GPU-" prefix), for an engine that maps by UUID because
// an index means another GPU under another CUDA_VISIBLE_DEVICES.
using CudaDevice = std::variant<int, std::string>;

// One CUDA tensor that views part of an IPC-exported allocation (docs/engines/torch-ipc.md). The
// storage is the whole allocation (storage_offset_bytes 0 and the allocation's size): the consumer
// caches mappings by (handle, storage offset), so one storage per allocation maps it once, and the
// tensor's place in it is element_offset.
struct CudaIpcTensor {
  std::string dtype;            // a torch dtype name of common/dtype.h, e.g. "bfloat16"
  std::vector<int64_t> shape;   // row-major contiguous; the strides follow from it
  uint64_t element_offset = 0;  // where the view starts in the storage, in elements of dtype
  uint64_t storage_size_bytes = 0;
  uint64_t storage_offset_bytes = 0;  // where the storage starts in the allocation
  std::string ipc_handle;             // the raw 64-byte cudaIpcMemHandle_t of the allocation
  CudaDevice device = 0;
  // A shared-memory name; one that does not exist only makes the consumer's best-effort
  // reference-count decrement fail quietly.
  std::string ref_counter_name = "/wsync_rc";
  // A cudaIpcEventHandle_t. With event_sync_required the consumer's stream waits on it before
  // using the tensor; without, the bytes are not read (zeros are fine).
  std::string event_handle = std::string(kCudaIpcHandleBytes, '\0');
  bool event_sync_required = false;
};

// Checks what torch would trip over later or, worse, not at all: a known dtype, a shape whose
// element count and strides fit int64, both handles 64 bytes, a device index >= 0 or a non-empty
// UUID, a storage of whole elements starting at an element boundary, and a view inside it.
// Everything refused is InvalidArgument.
absl::Status ValidateCudaIpcTensor(const CudaIpcTensor& tensor);

// Row-major contiguous strides in elements, as torch computes them (a zero dim counts as 1, so
// an empty tensor keeps the strides of a non-empty one). Refuses strides past int64.
absl::StatusOr<std::vector<int64_t>> ContiguousStrides(absl::Span<const int64_t> shape);

// Pieces, written onto `out` (whose PROTO and STOP are its own). Each validates what it writes.
// FUNC: GLOBAL torch.multiprocessing.reductions rebuild_cuda_tensor.
absl::Status WriteRebuildFunc(PickleWriter* out);
// ARGS: the tuple of the 15 rebuild arguments (docs/engines/torch-ipc.md).
absl::Status WriteRebuildArgs(const CudaIpcTensor& tensor, PickleWriter* out);
// The tensor object itself: FUNC ARGS REDUCE.
absl::Status WriteReducedTensor(const CudaIpcTensor& tensor, PickleWriter* out);
// The pair (FUNC, ARGS): FUNC ARGS TUPLE2, which consumers call as func(*args) themselves.
absl::Status WriteRebuildPair(const CudaIpcTensor& tensor, PickleWriter* out);
// torch.Size(dims): GLOBAL torch Size, the dims tuple, TUPLE1, REDUCE.
absl::Status WriteTorchSize(absl::Span<const int64_t> dims, PickleWriter* out);
// torch.<name>: GLOBAL torch <name>.
absl::Status WriteTorchDtype(DType dtype, PickleWriter* out);

// One of the ways above to write a tensor (WriteReducedTensor, WriteRebuildPair, WriteRebuildArgs),
// as a payload's container chooses it.
using TensorWriter = absl::Status (*)(const CudaIpcTensor& tensor, PickleWriter* out);

// One tensor of a flattened bucket (the FlattenedTensorMetadata dataclass, which more than one
// engine reads, each from its own module). The receiver takes flattened[start_idx:end_idx] and
// views or reshapes it to `shape`; units are elements of the flattened tensor, as the engine's
// payload says.
struct FlattenedTensorMetadata {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // a torch dtype name of common/dtype.h
  uint64_t start_idx = 0;
  uint64_t end_idx = 0;
  uint64_t numel = 0;
};

// The metadata object: GLOBAL <metadata_module> FlattenedTensorMetadata, EMPTY_TUPLE, NEWOBJ,
// then the state dict {name, shape: Size, dtype: torch dtype, start_idx, end_idx, numel} and BUILD
// (the class is a dataclass; NEWOBJ + BUILD makes it without calling its __init__ and without
// copyreg._reconstructor, which SGLang refuses). `metadata_module` is where the engine keeps the
// class: a constant of that engine's payload code, never data from a request, since the engine's
// unpickler resolves it; one of torch's modules is refused as INTERNAL, like any GLOBAL outside
// the allowed set. Checks only the entry itself (a known dtype, a sound shape,
// end_idx - start_idx == numel); the payloads check it against the bucket.
absl::Status WriteFlattenedTensorMetadata(const FlattenedTensorMetadata& metadata,
                                          absl::string_view metadata_module, PickleWriter* out);

// What CheckFlattenedTensorMetadata read from an entry.
struct CheckedMetadata {
  DType dtype;
  uint64_t shape_numel;  // the element count of the entry's shape
};
// What holds for an entry whatever the bucket: a name, a known dtype, a sound shape and a range
// whose length is numel. INVALID_ARGUMENT naming the entry otherwise.
absl::StatusOr<CheckedMetadata> CheckFlattenedTensorMetadata(const FlattenedTensorMetadata& m);
// INVALID_ARGUMENT unless the entry's range ends within the flattened tensor's `flat_numel`
// elements.
absl::Status CheckMetadataRange(const FlattenedTensorMetadata& m, uint64_t flat_numel);

// A flattened or buffer tensor is sliced by the receiver with flat[start:end]: INVALID_ARGUMENT,
// naming `what`, unless it is 1-D; CheckUint8Buffer also unless it is uint8 (a byte view of the
// buffer).
absl::Status CheckOneDimensional(const CudaIpcTensor& tensor, absl::string_view what);
absl::Status CheckUint8Buffer(const CudaIpcTensor& tensor, absl::string_view what);
// INVALID_ARGUMENT, naming `what`, unless `bytes` is a 64-byte CUDA IPC memory or event handle.
absl::Status CheckIpcHandleSize(absl::string_view what, absl::string_view bytes);

struct NamedCudaTensor {
  std::string name;
  CudaIpcTensor tensor;
};

// A whole pickle: list[(name, tensor)], each tensor as `write` puts it. Every name non-empty.
absl::StatusOr<std::string> NamedTensorListPickle(absl::Span<const NamedCudaTensor> tensors,
                                                  TensorWriter write);

// `status` with "prefix: " before its message (OK stays OK), so an error names the part of a
// payload it is about.
absl::Status PrefixStatus(absl::string_view prefix, const absl::Status& status);
// A shape as errors print it: "[2, 3]".
std::string ShapeText(absl::Span<const int64_t> shape);

// ---- checkpoint-engine's frames ----------------------------------------------------------------

// SGLang /update_weights_from_ipc (checkpoint-engine's worker, docs/engines/sglang.md): one pickle
// per ZMQ frame. First frame: (FUNC, ARGS) of the whole buffer as a 1-D uint8 tensor.
absl::StatusOr<std::string> CheckpointEngineBufferFrame(const CudaIpcTensor& buffer);
// One tensor of a bucket frame: viewed at byte `offset` of the buffer as `dtype` and `shape`.
struct CheckpointEngineTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // a torch dtype name of common/dtype.h
  uint64_t offset = 0;
};
// A bucket frame: [{"name": str, "shape": Size, "dtype": torch dtype, "offset": int}, ...].
// Every offset is a multiple of its dtype's size (the worker views the bytes as that dtype) and
// every tensor lies within the buffer's `buffer_bytes`.
absl::StatusOr<std::string> CheckpointEngineBucketFrame(
    absl::Span<const CheckpointEngineTensor> tensors, uint64_t buffer_bytes);
// The frame that ends a phase of the exchange: None.
std::string CheckpointEngineNoneFrame();
// The frame that makes a rank give up the update: RuntimeError(reason), which the worker raises
// (builtins.RuntimeError: this frame goes to a plain unpickler, never to SGLang's allow-list).
// The reason is cut to 512 bytes, and bytes outside printable ASCII become '?'.
std::string CheckpointEngineAbortFrame(absl::string_view reason);

}  // namespace wsync

#endif  // WSYNC_COMMON_TORCH_IPC_TORCH_IPC_PICKLE_H_
