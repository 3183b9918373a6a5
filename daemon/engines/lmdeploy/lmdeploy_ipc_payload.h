#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PAYLOAD_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PAYLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/bucket_format.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The body of LMDeploy's POST /update_weights for one bucket (engine-protocols.md §5.3):
// {"serialized_named_tensors": [one base64 pickle per TP rank], "load_format", "finished"}.
// Rank r reads entry r, and its pickle names memory on its own GPU; the device argument is an
// index, which LMDeploy replaces with its current device.
//
// kFlattened ("flattened_bucket"): {"metadata": [FlattenedTensorMetadata in elements],
// "flattened_tensor": (rebuild_cuda_tensor, args), "require_clone": False, "event_ipc_handle"}.
// The flattened tensor is the slot viewed as the bucket's one dtype: LMDeploy rebuilds each entry
// as flat[start:end].reshape(shape) and casts it to the entry's dtype when they differ, so a
// bucket of two dtypes would be loaded as values cast, not as its bytes. Every bucket therefore
// has one dtype (LmdeployBucketDtype; the adapter's BucketRules make the planner cut so).
//
// The flattened tensor goes on every request, not once per cycle (the compatible strategy of
// §5.3): a server from before PR #4397 rebuilds it on every call anyway, and a later one caches
// only one tensor, which a request for another slot (wsyncd alternates slots) must replace. The
// slot's event goes both in the rebuild arguments (event_sync_required, so torch waits on it) and
// as event_ipc_handle (the worker waits on it and records it after loading); in host mode there
// is none and event_ipc_handle is 64 zero bytes. Sending the tensor once per version needs the
// slots to be regions of one allocation per GPU, which BufferPool does not make yet.
//
// kPerTensor (null): [(name, (rebuild_cuda_tensor, args)), ...], each tensor viewed in its own
// dtype at its offset in the slot; LMDeploy clones each one.
//
// `finished` is true on the update's last bucket: LMDeploy then runs its modules' post-load hooks
// and drops the tensor and event it cached.
absl::StatusOr<nlohmann::json> LmdeployIpcBucketBody(const BucketManifest& manifest,
                                                     const std::vector<IpcBucketView>& ranks,
                                                     BucketFormat format, bool finished);

// A request that loads nothing and only finishes the update: `ranks` pickles listing no tensor
// (empty metadata, or an empty list), finished true. LMDeploy's update_params loads no weight
// from them, returns before caching anything, and still runs the finished hooks (read at
// InternLM/lmdeploy@1263d5cd, model_agent/agent.py); PR #4964 keeps "empty finished=true" too.
absl::StatusOr<nlohmann::json> LmdeployFinishOnlyBody(uint32_t ranks, BucketFormat format);

// The one dtype of a flattened bucket; INVALID_ARGUMENT naming the first tensor of another.
absl::StatusOr<DType> LmdeployBucketDtype(const BucketManifest& manifest);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PAYLOAD_H_
