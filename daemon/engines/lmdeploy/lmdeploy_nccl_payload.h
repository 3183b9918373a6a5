#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_NCCL_PAYLOAD_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_NCCL_PAYLOAD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/bucket_format.h"
#include "nlohmann/json.hpp"

namespace wsync {

// LMDeploy's NCCL path (PR #4638; docs/engines/lmdeploy.md, "Disaggregated"): the same torch helper
// as SGLang's (TCPStore rendezvous, PrefixStore(group_name), ProcessGroupNCCL without device_id),
// ranks rank_offset + tp_rank, and group_name required on every call (no default).

// POST /init_weights_update_group is the helper's own body: TorchGroupInitBody
// (daemon/engines/torch_group_body.h).

// POST /update_weights_from_distributed for one bucket: names, dtypes, shapes in order,
// group_name, load_format ("flattened_bucket" or null) and `finished` (the update's last bucket:
// the model's post-load hooks run and captured CUDA graphs are dropped).
nlohmann::json LmdeployDistributedBucketBody(const BucketManifest& manifest,
                                             const std::string& group_name, BucketFormat format,
                                             bool finished);
// The request that loads nothing and finishes (names empty, finished true): no broadcast.
nlohmann::json LmdeployDistributedFinishBody(const std::string& group_name, BucketFormat format);

// The broadcasts the engine posts for the bucket, in order. flattened_bucket: one broadcast of the
// element-typed concatenation (FlattenedTensorBucket refuses mixed dtypes, so the bucket has one
// dtype and its tensors lie back to back); null: one per tensor in its own dtype.
absl::StatusOr<std::vector<BroadcastPiece>> LmdeployBroadcastPieces(const BucketManifest& manifest,
                                                                    BucketFormat format);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_NCCL_PAYLOAD_H_
