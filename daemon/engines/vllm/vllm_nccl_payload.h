#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_NCCL_PAYLOAD_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_NCCL_PAYLOAD_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/vllm/vllm_options.h"
#include "daemon/engines/vllm/vllm_version.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

// vLLM's NCCL weight-transfer backend (docs/engines/vllm.md, "The NCCL backend"), wsyncd as rank 0
// and the engine's workers at rank_offset + dp_index * TP * PP + rank (one engine's ranks numbered
// in a row from its offset).

// {"init_info": {...}} for POST /init_weight_transfer_engine. Unset fields are left out, as
// vLLM's own trainer helper drops them (its init dataclass refuses unknown keys):
//   rank_offset, world_size                                   always
//   nccl_unique_id_b64 (RFC 4648 base64, padded)              unique-id rendezvous
//   master_address, master_port                               stateless-store rendezvous
//   packed, packed_buffer_size_bytes, packed_num_buffers      where the variant reads them here
absl::StatusOr<nlohmann::json> VllmNcclInitBody(const Rendezvous& rendezvous,
                                                const EngineEndpoint& endpoint,
                                                const VllmVariant& variant,
                                                const VllmOptions& options);

// {"update_info": {"names", "dtype_names", "shapes"}} for POST /update_weights, plus packed and
// its sizes on the generation that read them per update.
nlohmann::json VllmNcclBucketBody(const BucketManifest& manifest, const VllmVariant& variant,
                                  const VllmOptions& options);

// The broadcasts the workers post for a bucket, in order (packed_tensor.py, nccl_engine.py):
//  unpacked  one per tensor in names order, in its own dtype, count = numel;
//  packed    uint8 chunks: walking the tensors in order and adding each one's bytes, a chunk
//            closes right after the tensor whose bytes take its total past chunk_bytes (strictly
//            greater; that tensor stays in it), and the rest is the last chunk. A chunk is its
//            tensors' bytes back to back, so a packed bucket must be laid out so from byte 0.
absl::StatusOr<std::vector<BroadcastPiece>> VllmNcclPieces(const BucketManifest& manifest,
                                                           bool packed, uint64_t chunk_bytes);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_NCCL_PAYLOAD_H_
