#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PICKLE_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PICKLE_H_

// LMDeploy's torch IPC pickles (docs/engines/lmdeploy.md), raw: the caller base64-encodes them.
// Built from the engine-neutral pieces of common/torch_ipc/torch_ipc_pickle.h.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/torch_ipc/torch_ipc_pickle.h"

namespace wsync {

// Where LMDeploy keeps its FlattenedTensorMetadata class.
inline constexpr absl::string_view kLmdeployMetadataModule = "lmdeploy.utils";

// /update_weights, load_format null: list[(name, (FUNC, ARGS))], for one TP rank.
absl::StatusOr<std::string> LmdeployNamedTensorsPickle(absl::Span<const NamedCudaTensor> tensors);

// load_format "flattened_bucket", for one TP rank (docs/engines/lmdeploy.md).
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

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PICKLE_H_
