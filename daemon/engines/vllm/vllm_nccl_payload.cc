#include "daemon/engines/vllm/vllm_nccl_payload.h"

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "daemon/engines/vllm/vllm_ipc_payload.h"

namespace wsync {
namespace {

// vLLM's own default (packed_tensor.py): the wire does not depend on it, only receive streams.
constexpr int kPackedNumBuffers = 2;

void AddPackedFields(nlohmann::json& info, const VllmOptions& options) {
  info["packed"] = options.packed();
  if (options.packed()) {
    info["packed_buffer_size_bytes"] = options.packed_chunk_bytes();
    info["packed_num_buffers"] = kPackedNumBuffers;
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> VllmNcclInitBody(const Rendezvous& rendezvous,
                                                const EngineEndpoint& endpoint,
                                                const VllmVariant& variant,
                                                const VllmOptions& options) {
  nlohmann::json info = {{"rank_offset", endpoint.rank_offset},
                         {"world_size", rendezvous.world_size}};
  switch (rendezvous.mode) {
    case RendezvousMode::kUniqueIdInInit:
      if (!variant.nccl_unique_id) {
        return absl::FailedPreconditionError(
            "this vLLM reads no nccl_unique_id_b64; use the stateless-store rendezvous");
      }
      if (rendezvous.unique_id.size() != 128) {
        return absl::InternalError(
            absl::StrCat("an ncclUniqueId is 128 bytes, not ", rendezvous.unique_id.size()));
      }
      info["nccl_unique_id_b64"] = absl::Base64Escape(rendezvous.unique_id);
      break;
    case RendezvousMode::kStatelessStore:
      info["master_address"] = rendezvous.master_address;
      info["master_port"] = rendezvous.master_port;
      break;
    case RendezvousMode::kTorchStore:
      return absl::InternalError("vLLM has no torch-store rendezvous");
  }
  if (variant.nccl_packed_at == VllmPackedAt::kInitInfo) AddPackedFields(info, options);
  return nlohmann::json{{"init_info", std::move(info)}};
}

nlohmann::json VllmNcclBucketBody(const BucketManifest& manifest, const VllmVariant& variant,
                                  const VllmOptions& options) {
  nlohmann::json names = nlohmann::json::array();
  nlohmann::json dtype_names = nlohmann::json::array();
  nlohmann::json shapes = nlohmann::json::array();
  for (const TensorEntry& t : manifest.tensors) {
    names.push_back(t.name);
    dtype_names.push_back(std::string(DTypeName(t.dtype)));
    shapes.push_back(t.shape);
  }
  nlohmann::json info = {{"names", std::move(names)},
                         {"dtype_names", std::move(dtype_names)},
                         {"shapes", std::move(shapes)}};
  if (variant.nccl_packed_at == VllmPackedAt::kUpdateInfo) AddPackedFields(info, options);
  return nlohmann::json{{"update_info", std::move(info)}};
}

absl::StatusOr<std::vector<BroadcastPiece>> VllmNcclPieces(const BucketManifest& manifest,
                                                           bool packed, uint64_t chunk_bytes) {
  std::vector<BroadcastPiece> pieces;
  if (!packed) {
    for (const TensorEntry& t : manifest.tensors) {
      pieces.push_back(BroadcastPiece{t.offset, t.length / DTypeSize(t.dtype), t.dtype});
    }
    return pieces;
  }
  WSYNC_RETURN_IF_ERROR(VllmCheckPackedLayout(manifest));
  if (chunk_bytes == 0) return absl::InvalidArgumentError("packed chunk size 0");
  uint64_t start = 0;
  uint64_t running = 0;
  size_t in_chunk = 0;  // a chunk of empty tensors is still broadcast, as vLLM posts it
  for (const TensorEntry& t : manifest.tensors) {
    running += t.length;
    ++in_chunk;
    if (running > chunk_bytes) {
      pieces.push_back(BroadcastPiece{start, running, DType::kUint8});
      start += running;
      running = 0;
      in_chunk = 0;
    }
  }
  if (in_chunk > 0) pieces.push_back(BroadcastPiece{start, running, DType::kUint8});
  return pieces;
}

}  // namespace wsync
