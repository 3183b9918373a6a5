#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_PICKLE_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_PICKLE_H_

// vLLM's torch IPC pickles (docs/engines/vllm.md), raw: the caller base64-encodes them. Built from
// the engine-neutral pieces of common/torch_ipc/torch_ipc_pickle.h.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/torch_ipc/torch_ipc_pickle.h"

namespace wsync {

// One tensor as the GPUs of a node see it, keyed by GPU UUID: a vLLM worker picks the entry of
// its own GPU (str(props.uuid)).
struct TensorOnGpu {
  std::string gpu_uuid;
  CudaIpcTensor tensor;
};

// ipc_handles_pickled: one dict {gpu_uuid: entry} per name, in the order of the request's names.
// The older builds want entry = (FUNC, ARGS); the newest unpacked form wants the ARGS tuple alone.
enum class VllmEntryForm { kFuncArgs, kArgsOnly };
absl::StatusOr<std::string> VllmIpcHandlesPickle(absl::Span<const std::vector<TensorOnGpu>> names,
                                                 VllmEntryForm form);
// The newest packed form: one dict {gpu_uuid: ARGS} for a chunk's 1-D uint8 buffer.
absl::StatusOr<std::string> VllmPackedIpcHandlesPickle(absl::Span<const TensorOnGpu> chunk);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_PICKLE_H_
