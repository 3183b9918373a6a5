#include "daemon/engines/vllm/vllm_ipc_binding.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/engines/vllm/vllm_adapter.h"
#include "daemon/engines/vllm/vllm_ipc_payload.h"

namespace wsync {

absl::StatusOr<EngineRequest> VllmIpcBinding::BucketRequest(const BucketManifest& manifest,
                                                            const std::vector<IpcBucketView>& ranks,
                                                            const BucketContext& context) const {
  const EngineEndpoint& endpoint = adapter_.endpoint_;
  if (ranks.size() != endpoint.ranks) {
    return absl::InternalError(absl::StrCat("engine ", endpoint.url, " has ", endpoint.ranks,
                                            " TP rank(s) but the bucket has ", ranks.size(),
                                            " view(s)"));
  }
  std::optional<VllmVariant> variant = adapter_.variant();
  if (!variant.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", endpoint.url, " was never probed"));
  }
  auto body = VllmIpcBucketBody(manifest, ranks, *variant, adapter_.options_.packed(), context);
  if (!body.ok()) {
    return absl::Status(body.status().code(),
                        absl::StrCat("engine ", endpoint.url, ": ", body.status().message()));
  }
  return EngineRequest{kVllmBucketPath, body->dump()};
}

absl::Status VllmIpcBinding::ProbeServer() {
  // The IPC backend needs nothing at init (its init_info is empty), but the route must answer:
  // it is how a server without the dev routes or without the ipc backend shows itself.
  return adapter_.PostInit({{"init_info", nlohmann::json::object()}});
}

}  // namespace wsync
