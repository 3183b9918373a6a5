#include "daemon/engines/vllm/vllm_nccl_binding.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/vllm/vllm_adapter.h"
#include "daemon/engines/vllm/vllm_nccl_payload.h"

namespace wsync {

std::vector<RendezvousMode> VllmNcclBinding::RendezvousModes() const {
  return {adapter_.options_.rendezvous() == VllmRendezvous::kUniqueId
              ? RendezvousMode::kUniqueIdInInit
              : RendezvousMode::kStatelessStore};
}

absl::Status VllmNcclBinding::InitGroup(const Rendezvous& rendezvous) {
  std::optional<VllmVariant> variant = adapter_.variant();
  if (!variant.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", adapter_.endpoint_.url, " was never probed"));
  }
  WSYNC_ASSIGN_OR_RETURN(nlohmann::json body, VllmNcclInitBody(rendezvous, adapter_.endpoint_,
                                                               *variant, adapter_.options_));
  // Answers once every worker has run ncclCommInitRank and the warm-up all-reduce.
  return adapter_.PostInit(body);
}

absl::Status VllmNcclBinding::DestroyGroup(const std::string& /*group_name*/) {
  // vLLM has no route that drops its weight-transfer group; the next init replaces it.
  return absl::OkStatus();
}

absl::StatusOr<EngineRequest> VllmNcclBinding::BucketRequest(
    const BucketManifest& manifest, const std::string& /*group_name*/,
    const BucketContext& /*context*/) const {
  std::optional<VllmVariant> variant = adapter_.variant();
  if (!variant.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", adapter_.endpoint_.url, " was never probed"));
  }
  return EngineRequest{kVllmBucketPath,
                       VllmNcclBucketBody(manifest, *variant, adapter_.options_).dump()};
}

absl::StatusOr<std::vector<BroadcastPiece>> VllmNcclBinding::Pieces(
    const BucketManifest& manifest) const {
  return VllmNcclPieces(manifest, adapter_.options_.packed(),
                        adapter_.options_.packed_chunk_bytes());
}

absl::Status VllmNcclBinding::ProbeServer() {
  const EngineEndpoint& endpoint = adapter_.endpoint_;
  auto answer = adapter_.http_.GetJson("/get_world_size?include_dp=true", adapter_.timeouts_.probe);
  if (!answer.ok()) {
    if (answer.status().code() == absl::StatusCode::kUnimplemented) {
      return absl::FailedPreconditionError(
          absl::StrCat(answer.status().message(),
                       "; vLLM serves /get_world_size only in dev mode: ", adapter_.ServerFlags()));
    }
    return answer.status();
  }
  auto size = answer->find("world_size");
  if (size == answer->end() || !size->is_number_unsigned()) {
    return absl::FailedPreconditionError(
        absl::StrCat(endpoint.url,
                     "/get_world_size answered without a non-negative world_size: not a vLLM "
                     "server wsyncd knows"));
  }
  if (size->get<uint64_t>() != endpoint.ranks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", endpoint.url, " has ", size->get<uint64_t>(),
        " worker(s) (GET /get_world_size?include_dp=true: TP x PP x DP) but the group gives it ",
        endpoint.ranks, " rank(s): every worker joins the group, so give the engine ",
        size->get<uint64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace wsync
