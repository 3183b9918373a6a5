#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_PAYLOAD_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_PAYLOAD_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/vllm/vllm_version.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The body of vLLM's POST /update_weights for one bucket on the IPC backend
// (docs/engines/vllm.md, "What an update sends"):
//   {"update_info": {"names", "dtype_names", "shapes", "ipc_handles_pickled": base64(pickle)}}
// vLLM reads the pickle with plain pickle.loads (behind VLLM_ALLOW_INSECURE_SERIALIZATION=1);
// wsyncd still writes only torch's own GLOBALs (common/torch_ipc/torch_ipc_pickle.h).
//
// Every dict in the pickle maps a GPU UUID (str(torch.cuda.get_device_properties(d).uuid), no
// "GPU-" prefix) to that GPU's entry, one key per TP rank of the engine, taken from the views:
// each worker picks entry[its own UUID], overwrites rebuild argument 6 with its local device
// index, and rebuilds. A dict that lacks a worker's UUID makes that worker raise inside the
// engine, which leaves the engine dead with its weights on the meta device (vLLM #57853),
// so a view without a UUID is refused here before anything is sent. Ranks that share a GPU share
// its one key, so they must see the same memory (refused otherwise).
//
// Unpacked (every generation): one dict per name, each tensor its own typed view of the slot
// (one storage per slot, so a worker maps a slot once); the entry is (FUNC, ARGS) or ARGS alone as
// the variant says.
// Packed (variant.packed_ipc): ipc_handles_pickled is ONE dict for the bucket as a 1-D uint8
// chunk, plus "tensor_sizes" (bytes per tensor, in names order), "packed": true and, where the
// variant reads them, "first_chunk" (bucket index 0) and "last_chunk" (the trainer's last
// bucket). vLLM cuts consecutive tensor_sizes bytes from the chunk's start and clones each
// tensor, so the bucket must lie back to back from its first byte (VllmCheckPackedLayout), which
// is how the client's planner lays every bucket out; wsyncd chooses the chunk boundaries itself,
// so no close_after rule applies on this path.
absl::StatusOr<nlohmann::json> VllmIpcBucketBody(const BucketManifest& manifest,
                                                 const std::vector<IpcBucketView>& ranks,
                                                 const VllmVariant& variant, bool packed,
                                                 const BucketContext& context);

// INVALID_ARGUMENT naming the first tensor that does not start where the previous one ended (the
// first at byte 0): a packed chunk has no way to say where a tensor starts.
absl::Status VllmCheckPackedLayout(const BucketManifest& manifest);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_PAYLOAD_H_
