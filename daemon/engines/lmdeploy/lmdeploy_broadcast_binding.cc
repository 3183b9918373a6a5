#include "daemon/engines/lmdeploy/lmdeploy_broadcast_binding.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"
#include "daemon/engines/lmdeploy/lmdeploy_nccl_payload.h"
#include "daemon/engines/torch_group_body.h"

namespace wsync {
namespace {

constexpr char kDistributedPath[] = "/update_weights_from_distributed";

}  // namespace

absl::Status LmdeployBroadcastBinding::NotPytorchBackend(const char* path) const {
  return absl::FailedPreconditionError(absl::StrCat(
      adapter_.endpoint_.url, path,
      " answered HTTP 501: only LMDeploy's pytorch backend (--backend pytorch, Ray executor) "
      "serves weight-update groups; restart the server so (not retried: a configuration error)"));
}

absl::Status LmdeployBroadcastBinding::PostDistributed(const char* path,
                                                       const nlohmann::json& body) const {
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply,
                         adapter_.http_.Post(path, body, adapter_.timeouts_.control));
  if (reply.status == 501) return NotPytorchBackend(path);
  return adapter_.http_.ExpectSuccess(path, reply).status();
}

absl::Status LmdeployBroadcastBinding::InitGroup(const Rendezvous& rendezvous) {
  WSYNC_RETURN_IF_ERROR(
      PostDistributed("/init_weights_update_group",
                      TorchGroupInitBody(rendezvous, adapter_.endpoint_.rank_offset)));
  std::lock_guard<std::mutex> lock(adapter_.mu_);
  adapter_.group_name_ = rendezvous.group_name;
  return absl::OkStatus();
}

absl::Status LmdeployBroadcastBinding::DestroyGroup(const std::string& group_name) {
  return PostDistributed("/destroy_weights_update_group", {{"group_name", group_name}});
}

absl::StatusOr<EngineRequest> LmdeployBroadcastBinding::BucketRequest(
    const BucketManifest& manifest, const std::string& group_name,
    const BucketContext& context) const {
  if (context.last) {
    std::lock_guard<std::mutex> lock(adapter_.mu_);
    adapter_.finished_update_ = context.update_id;
  }
  return EngineRequest{
      kDistributedPath,
      LmdeployDistributedBucketBody(manifest, group_name, adapter_.format_, context.last).dump()};
}

absl::StatusOr<std::vector<BroadcastPiece>> LmdeployBroadcastBinding::Pieces(
    const BucketManifest& manifest) const {
  return LmdeployBroadcastPieces(manifest, adapter_.format_);
}

absl::Status LmdeployBroadcastBinding::CheckRoutes(bool update_group) const {
  if (update_group) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "engine ", adapter_.endpoint_.url,
      " is an LMDeploy server without POST /init_weights_update_group (PR #4638, 2026-06-16), "
      "so it cannot join a broadcast group: upgrade it, or use the ipc transport"));
}

void LmdeployBroadcastBinding::AddHealth(bool update_group, EngineHealth* health) const {
  if (!update_group) {
    health->variant = "unsupported";
    health->error = "no POST /init_weights_update_group (PR #4638), which a broadcast group needs";
    return;
  }
  health->variant = absl::StrCat("nccl ", BucketFormatName(adapter_.format_));
}

absl::Status LmdeployBroadcastBinding::ValidateBucket(const BucketManifest& manifest) const {
  return Pieces(manifest).status();
}

absl::Status LmdeployBroadcastBinding::CheckBucketReply(const HttpReply& reply) const {
  if (reply.status == 501) return NotPytorchBackend(kDistributedPath);
  return adapter_.http_.ExpectSuccess(kDistributedPath, reply).status();
}

absl::Status LmdeployBroadcastBinding::FinishOnly() {
  std::string group;
  {
    std::lock_guard<std::mutex> lock(adapter_.mu_);
    group = adapter_.group_name_;
  }
  return PostDistributed(kDistributedPath, LmdeployDistributedFinishBody(group, adapter_.format_));
}

}  // namespace wsync
