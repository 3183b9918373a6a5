#ifndef WSYNC_DAEMON_ENGINES_TORCH_GROUP_BODY_H_
#define WSYNC_DAEMON_ENGINES_TORCH_GROUP_BODY_H_

#include <cstdint>

#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The request bodies shared by the engines whose ranks join wsyncd's collective through the same
// torch helper (SGLang's init_custom_process_group, which LMDeploy copies): docs/engines/sglang.md
// and lmdeploy.md, "The disaggregated path".

// POST /init_weights_update_group: where the TCPStore is, the world, the engine's first rank and
// the group's name, backend "nccl".
nlohmann::json TorchGroupInitBody(const Rendezvous& rendezvous, uint32_t rank_offset);

// The three parallel lists of an /update_weights_from_distributed body, in the bucket's order:
// {"names": [...], "dtypes": [torch dtype names], "shapes": [[...], ...]}.
nlohmann::json BucketTensorLists(const BucketManifest& manifest);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_TORCH_GROUP_BODY_H_
