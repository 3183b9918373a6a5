#ifndef WSYNC_COMMON_TORCH_IPC_PICKLE_H_
#define WSYNC_COMMON_TORCH_IPC_PICKLE_H_

// The pickles an engine's torch turns into CUDA tensors mapped onto wsyncd's buffers, written
// without torch (docs/engines/torch-ipc.md). A tensor is what torch.multiprocessing.reductions.
// reduce_tensor makes of a CUDA tensor: rebuild_cuda_tensor and its 15 arguments. Around it each
// engine wants its own container (its page in docs/engines); the functions at the end return those
// whole pickles, raw (the caller base64-encodes them where the engine wants text).
//
// Only these GLOBALs are ever written, because SGLang's SafeUnpickler accepts exact
// (module, name) pairs and nothing else: torch.multiprocessing.reductions.rebuild_cuda_tensor,
// torch.Tensor, torch.Size, torch.storage.TypedStorage, torch.<dtype> for the dtypes of
// common/dtype.h, and FlattenedTensorMetadata under the module of MetadataModule. The one
// exception is CheckpointEngineAbortFrame, read by checkpoint-engine's plain unpickler.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/pickle_writer.h"

namespace wsync {

// Size of a cudaIpcMemHandle_t and of a cudaIpcEventHandle_t.
inline constexpr size_t kCudaIpcHandleBytes = 64;

// Rebuild argument 6: the GPU the consumer maps the storage on. An index (vLLM and LMDeploy
// replace it with their own device anyway) or, for SGLang, the GPU's UUID as torch prints it
// (str(get_device_properties(d).uuid), no "GPU-" prefix), because an index means another GPU
// under another CUDA_VISIBLE_DEVICES.
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

// Where the engine keeps its FlattenedTensorMetadata class. SGLang's SafeUnpickler accepts only
// the tensor_bucket path (not the old model_runner re-export).
enum class MetadataModule {
  kSglangTensorBucket,  // sglang.srt.weight_sync.tensor_bucket
  kLmdeployUtils,       // lmdeploy.utils
};
absl::string_view MetadataModuleName(MetadataModule module);

// One tensor of a flattened bucket (SGLang's FlattenedTensorBucket, which LMDeploy reads too). The
// receiver takes flattened[start_idx:end_idx] and views or reshapes it to `shape`. Units are
// elements of the flattened tensor: bytes for SGLang's uint8 bucket, elements of the common dtype
// for its old bucket and for LMDeploy.
struct FlattenedTensorMetadata {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // a torch dtype name of common/dtype.h
  uint64_t start_idx = 0;
  uint64_t end_idx = 0;
  uint64_t numel = 0;
};

// The metadata object: GLOBAL <module> FlattenedTensorMetadata, EMPTY_TUPLE, NEWOBJ, then the
// state dict {name, shape: Size, dtype: torch dtype, start_idx, end_idx, numel} and BUILD (the
// class is a dataclass; NEWOBJ + BUILD makes it without calling its __init__ and without
// copyreg._reconstructor, which SGLang refuses). Checks only the entry itself (a known dtype,
// a sound shape, end_idx - start_idx == numel); the wrappers check it against the bucket.
absl::Status WriteFlattenedTensorMetadata(const FlattenedTensorMetadata& metadata,
                                          MetadataModule module, PickleWriter* out);

// ---- Whole pickles, one per engine payload -----------------------------------------------------

struct NamedCudaTensor {
  std::string name;
  CudaIpcTensor tensor;
};

// One tensor as the GPUs of a node see it, keyed by GPU UUID: a vLLM worker picks the entry of
// its own GPU (str(props.uuid)).
struct TensorOnGpu {
  std::string gpu_uuid;
  CudaIpcTensor tensor;
};

// SGLang update_weights_from_tensor, load_format null: list[(name, Tensor)], for one TP rank.
absl::StatusOr<std::string> SglangNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors);

// SGLang load_format "flattened_bucket": {"flattened_tensor": Tensor, "metadata": [M, ...]},
// for one TP rank. `flattened` is 1-D. Each entry's dtype is the flattened tensor's (the old
// bucket, element units) or the flattened tensor is uint8 (the new bucket: byte units, each
// range viewed as its dtype, so it must start on that dtype's boundary).
absl::StatusOr<std::string> SglangFlattenedBucketPickle(
    const CudaIpcTensor& flattened, absl::Span<const FlattenedTensorMetadata> metadata);

// vLLM IPC, ipc_handles_pickled: one dict {gpu_uuid: entry} per name, in the order of the
// request's names. The older builds want entry = (FUNC, ARGS); the newest unpacked form wants
// the ARGS tuple alone.
enum class VllmEntryForm { kFuncArgs, kArgsOnly };
absl::StatusOr<std::string> VllmIpcHandlesPickle(absl::Span<const std::vector<TensorOnGpu>> names,
                                                 VllmEntryForm form);
// vLLM IPC, newest packed form: one dict {gpu_uuid: ARGS} for a chunk's 1-D uint8 buffer.
absl::StatusOr<std::string> VllmPackedIpcHandlesPickle(absl::Span<const TensorOnGpu> chunk);

// LMDeploy /update_weights, load_format null: list[(name, (FUNC, ARGS))], for one TP rank.
absl::StatusOr<std::string> LmdeployNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors);

// LMDeploy load_format "flattened_bucket", for one TP rank (docs/engines/lmdeploy.md).
struct LmdeployFlattenedBucket {
  std::vector<FlattenedTensorMetadata> metadata;  // element units of the flattened tensor
  // The 1-D view of the buffer, typed as the bucket's dtype. The worker caches it until
  // `finished`, so later calls of a cycle may leave it out; a call that carries it must carry
  // metadata too, or the worker returns before caching it.
  std::optional<CudaIpcTensor> flattened_tensor;
  // wsyncd's interprocess event: the worker waits on it before reading and records it after.
  std::string event_ipc_handle = std::string(kCudaIpcHandleBytes, '\0');
};
// {"metadata": [M, ...], "flattened_tensor": (FUNC, ARGS) if given, "require_clone": False,
//  "event_ipc_handle": bytes(64)}. LMDeploy casts a range whose dtype differs from the
// flattened tensor's (a value cast, not a view), so every entry must have the bucket's dtype.
absl::StatusOr<std::string> LmdeployFlattenedBucketPickle(const LmdeployFlattenedBucket& bucket);

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

#endif  // WSYNC_COMMON_TORCH_IPC_PICKLE_H_
