#include "daemon/engines/sglang/sglang_ipc_binding.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/engines/sglang/sglang_ipc_payload.h"

namespace wsync {

absl::StatusOr<EngineRequest> SglangIpcBinding::BucketRequest(
    const BucketManifest& manifest, const std::vector<IpcBucketView>& ranks,
    const BucketContext& context) const {
  const EngineEndpoint& endpoint = adapter_.endpoint_;
  if (ranks.size() != endpoint.ranks) {
    return absl::InternalError(absl::StrCat("engine ", endpoint.url, " has ", endpoint.ranks,
                                            " TP rank(s) but the bucket has ", ranks.size(),
                                            " view(s)"));
  }
  WSYNC_ASSIGN_OR_RETURN(nlohmann::json body,
                         SglangIpcBucketBody(manifest, ranks, adapter_.format_));
  // Session builds add the selector to this request's struct too.
  if (adapter_.sessions()) body["selector"] = "all";
  adapter_.LabelRequest(context.version, context.last, &body);
  return EngineRequest{bucket_path(), body.dump()};
}

absl::Status SglangIpcBinding::ValidateBucket(const BucketManifest& manifest) const {
  return adapter_.ValidateTensorLayout(manifest);
}

}  // namespace wsync
