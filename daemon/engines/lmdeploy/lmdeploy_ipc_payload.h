#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PAYLOAD_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PAYLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/bucket_format.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The body of LMDeploy's POST /update_weights for one bucket (docs/engines/lmdeploy.md,
// "Colocated"):
// {"serialized_named_tensors": [one base64 pickle per TP rank], "load_format", "finished"}.
// Rank r reads entry r, and its pickle names memory on its own GPU; the device argument is an
// index, which LMDeploy replaces with its current device.
//
// kFlattened ("flattened_bucket"): {"metadata": [FlattenedTensorMetadata in elements],
// "flattened_tensor"?: (rebuild_cuda_tensor, args), "require_clone": False, "event_ipc_handle"}.
// The flattened tensor is the view's whole allocation (a device's slots are regions of one)
// typed as the bucket's one dtype, and each entry's start/end index the bucket's place in it: the
// slot's offset plus the tensor's. LMDeploy rebuilds each entry as flat[start:end].reshape(shape)
// and casts it to the entry's dtype when they differ, so a bucket of two dtypes would be loaded
// as values cast, not as its bytes. Every bucket therefore has one dtype (LmdeployBucketDtype;
// the adapter's BucketRules make the planner cut so).
//
// The worker caches the flattened tensor (a live view: require_clone false) until `finished` or
// a sleep, so it goes only to the ranks in `send_tensor` (empty: every rank): the adapter sends
// it when the rank holds none, or one of another allocation or dtype (LmdeployAdapter). The
// slot's event goes as event_ipc_handle on every call, since the worker keeps only the latest:
// it waits on it before reading and records it after loading, which is what a refill of the slot
// waits for (MappedSlot::WaitReaders). The flattened tensor's rebuild arguments carry it too
// (event_sync_required). In host mode there is no event and event_ipc_handle is 64 zero bytes.
//
// kPerTensor (null): [(name, (rebuild_cuda_tensor, args)), ...], each tensor viewed in its own
// dtype at its offset in the allocation; LMDeploy clones each one.
//
// `finished` is true on the update's last bucket: LMDeploy then runs its modules' post-load hooks
// and drops the tensor and event it cached.
absl::StatusOr<nlohmann::json> LmdeployIpcBucketBody(const BucketManifest& manifest,
                                                     const std::vector<IpcBucketView>& ranks,
                                                     BucketFormat format, bool finished,
                                                     const std::vector<bool>& send_tensor = {});

// A request that loads nothing and only finishes the update: `ranks` pickles listing no tensor
// (empty metadata, or an empty list), finished true. LMDeploy's update_params loads no weight
// from them, returns before caching anything, and still runs the finished hooks (read at
// InternLM/lmdeploy@1263d5cd, model_agent/agent.py); PR #4964 keeps "empty finished=true" too.
absl::StatusOr<nlohmann::json> LmdeployFinishOnlyBody(uint32_t ranks, BucketFormat format);

// The one dtype of a flattened bucket; INVALID_ARGUMENT naming the first tensor of another.
absl::StatusOr<DType> LmdeployBucketDtype(const BucketManifest& manifest);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_PAYLOAD_H_
