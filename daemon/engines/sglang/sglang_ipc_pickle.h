#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_PICKLE_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_PICKLE_H_

// SGLang's torch IPC pickles (docs/engines/sglang.md), raw: the caller base64-encodes them. Built
// from the engine-neutral pieces of common/torch_ipc/torch_ipc_pickle.h.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/torch_ipc/torch_ipc_pickle.h"

namespace wsync {

// Where SGLang keeps its FlattenedTensorMetadata class. Its SafeUnpickler accepts only the
// tensor_bucket path (not the old model_runner re-export).
inline constexpr absl::string_view kSglangMetadataModule = "sglang.srt.weight_sync.tensor_bucket";

// update_weights_from_tensor, load_format null: list[(name, Tensor)], for one TP rank.
absl::StatusOr<std::string> SglangNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors);

// load_format "flattened_bucket" (SGLang's FlattenedTensorBucket): {"flattened_tensor": Tensor,
// "metadata": [M, ...]}, for one TP rank. `flattened` is 1-D. Each entry's dtype is the flattened
// tensor's (the old bucket: ranges in elements of that dtype) or the flattened tensor is uint8
// (the new bucket: ranges in bytes, each viewed as its dtype, so it must start on that dtype's
// boundary).
absl::StatusOr<std::string> SglangFlattenedBucketPickle(
    const CudaIpcTensor& flattened, absl::Span<const FlattenedTensorMetadata> metadata);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_PICKLE_H_
