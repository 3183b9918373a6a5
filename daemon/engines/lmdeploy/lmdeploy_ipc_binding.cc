#include "daemon/engines/lmdeploy/lmdeploy_ipc_binding.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_payload.h"

namespace wsync {

absl::StatusOr<EngineRequest> LmdeployIpcBinding::BucketRequest(
    const BucketManifest& manifest, const std::vector<IpcBucketView>& ranks,
    const BucketContext& context) const {
  if (ranks.size() != adapter_.endpoint_.ranks) {
    return absl::InternalError(
        absl::StrCat("engine ", adapter_.endpoint_.url, " has ", adapter_.endpoint_.ranks,
                     " TP rank(s) but the bucket has ", ranks.size(), " view(s)"));
  }
  std::lock_guard<std::mutex> lock(adapter_.mu_);
  // Another update (or one without an id, which cannot be told apart): the engine slept since
  // (PauseGeneration), so its workers hold nothing.
  if (context.update_id.empty() || context.update_id != adapter_.held_update_) {
    adapter_.ForgetHeldLocked();
    adapter_.held_update_ = context.update_id;
  }
  adapter_.held_.resize(ranks.size());
  std::vector<bool> send(ranks.size(), true);
  std::vector<std::optional<LmdeployAdapter::HeldTensor>> after = adapter_.held_;
  if (adapter_.format_ == BucketFormat::kFlattened) {
    WSYNC_ASSIGN_OR_RETURN(const DType dtype, LmdeployBucketDtype(manifest));
    for (size_t r = 0; r < ranks.size(); ++r) {
      const LmdeployAdapter::HeldTensor needed{ranks[r].memory_handle, ranks[r].allocation_bytes,
                                               dtype};
      send[r] = !adapter_.held_[r].has_value() || !(*adapter_.held_[r] == needed);
      after[r] = needed;
    }
  }
  auto body = LmdeployIpcBucketBody(manifest, ranks, adapter_.format_, context.last, send);
  if (!body.ok()) {
    // Nothing goes out, but the update fails; whatever follows cannot rely on the cache.
    adapter_.ForgetHeldLocked();
    return body.status();
  }
  adapter_.held_ = std::move(after);
  if (context.last) {
    adapter_.finished_update_ = context.update_id;
    // `finished` drops the cached tensor and event.
    adapter_.ForgetHeldLocked();
  }
  return EngineRequest{kLmdeployIpcBucketPath, body->dump()};
}

void LmdeployIpcBinding::AddHealth(bool /*update_group*/, EngineHealth* health) const {
  health->variant = absl::StrCat("ipc ", BucketFormatName(adapter_.format_));
}

absl::Status LmdeployIpcBinding::ValidateBucket(const BucketManifest& manifest) const {
  if (adapter_.format_ == BucketFormat::kFlattened) return LmdeployBucketDtype(manifest).status();
  // Per tensor, every view has its own dtype and offset; ValidateManifest keeps them aligned.
  return absl::OkStatus();
}

absl::Status LmdeployIpcBinding::CheckBucketReply(const HttpReply& reply) const {
  absl::Status status = CheckBucketAnswer(reply);
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(adapter_.mu_);
    adapter_.ForgetHeldLocked();
  }
  return status;
}

absl::Status LmdeployIpcBinding::CheckBucketAnswer(const HttpReply& reply) const {
  if (reply.status == 200) {
    // FastAPI's JSONResponse(content=None): the body is exactly null.
    if (absl::StripAsciiWhitespace(reply.body) == "null") return absl::OkStatus();
    adapter_.http_.LogBody(kLmdeployIpcBucketPath, reply);
    return absl::InternalError(absl::StrCat(adapter_.endpoint_.url, kLmdeployIpcBucketPath,
                                            " answered HTTP 200 with something other than null: "
                                            "not LMDeploy's answer to a weight update"));
  }
  if (reply.status == 400 && absl::StrContains(absl::AsciiStrToLower(reply.body), "pickle")) {
    // PR #4964: pickled payloads on HTTP /update_weights only with the server's opt-in.
    adapter_.http_.LogBody(kLmdeployIpcBucketPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(
        adapter_.endpoint_.url, kLmdeployIpcBucketPath,
        " answered HTTP 400, refusing pickled tensors: an LMDeploy server loads CUDA IPC "
        "weight updates only when it runs with LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1 in its "
        "environment; restart it so (not retried: a configuration error)"));
  }
  if (reply.status > 200 && reply.status < 300) {
    adapter_.http_.LogBody(kLmdeployIpcBucketPath, reply);
    return absl::InternalError(absl::StrCat(adapter_.endpoint_.url, kLmdeployIpcBucketPath,
                                            " answered HTTP ", reply.status,
                                            ": not LMDeploy's answer to a weight update"));
  }
  // 500 for an exception while loading; the status names it, the body stays in the log.
  return adapter_.http_.ExpectSuccess(kLmdeployIpcBucketPath, reply).status();
}

absl::Status LmdeployIpcBinding::FinishOnly() {
  WSYNC_ASSIGN_OR_RETURN(nlohmann::json body,
                         LmdeployFinishOnlyBody(adapter_.endpoint_.ranks, adapter_.format_));
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, adapter_.http_.Post(kLmdeployIpcBucketPath, body,
                                                              adapter_.timeouts_.control));
  return CheckBucketReply(reply);
}

}  // namespace wsync
