#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_PAYLOAD_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_PAYLOAD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The body of SGLang's POST /update_weights_from_tensor for one bucket (docs/engines/sglang.md
// and torch-ipc.md): serialized_named_tensors holds one base64 pickle per TP rank, rank i's naming
// memory on rank i's GPU (by UUID, as SGLang's patched reductions expect). Each pickle presents the
// view's whole allocation as one storage, so the rank maps a slot once and every later bucket of it
// reuses the mapping. With load_format "flattened_bucket" a rank gets one uint8 tensor of the
// bucket's bytes and FlattenedTensorMetadata in bytes (the receiver since PR #13413); with null,
// a list of (name, tensor) views in their own dtypes. Every bucket says flush_cache false: the
// label and the flush ride on the last one only (SglangAdapter::LabelRequest).
absl::StatusOr<nlohmann::json> SglangIpcBucketBody(const BucketManifest& manifest,
                                                   const std::vector<IpcBucketView>& ranks,
                                                   BucketFormat format);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_PAYLOAD_H_
