#include "daemon/engines/sglang/sglang_broadcast_binding.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/peer_text.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/engines/torch_group_body.h"

namespace wsync {

nlohmann::json SglangBroadcastBinding::InitGroupBody(const Rendezvous& rendezvous,
                                                     uint32_t rank_offset) {
  return TorchGroupInitBody(rendezvous, rank_offset);
}

absl::Status SglangBroadcastBinding::InitGroup(const Rendezvous& rendezvous) {
  return adapter_.http_
      .PostExpectSuccess("/init_weights_update_group",
                         InitGroupBody(rendezvous, adapter_.endpoint_.rank_offset),
                         adapter_.timeouts_.control)
      .status();
}

absl::Status SglangBroadcastBinding::DestroyGroup(const std::string& group_name) {
  return adapter_.http_
      .PostExpectSuccess("/destroy_weights_update_group", {{"group_name", group_name}},
                         adapter_.timeouts_.control)
      .status();
}

nlohmann::json SglangBroadcastBinding::BucketBody(const BucketManifest& manifest,
                                                  const std::string& group_name,
                                                  BucketFormat format, bool selector) {
  nlohmann::json body = BucketTensorLists(manifest);
  body["group_name"] = group_name;
  body["flush_cache"] = false;
  body["abort_all_requests"] = false;
  body["load_format"] = format == BucketFormat::kFlattened ? nlohmann::json("flattened_bucket")
                                                           : nlohmann::json(nullptr);
  if (selector) body["selector"] = "all";
  return body;
}

absl::StatusOr<EngineRequest> SglangBroadcastBinding::BucketRequest(
    const BucketManifest& manifest, const std::string& group_name,
    const BucketContext& context) const {
  // The label and the cache flush ride on the last bucket only (SglangAdapter::LabelRequest).
  nlohmann::json body = BucketBody(manifest, group_name, adapter_.format_, adapter_.sessions());
  adapter_.LabelRequest(context.version, context.last, &body);
  return EngineRequest{bucket_path(), body.dump()};
}

absl::StatusOr<std::vector<BroadcastPiece>> SglangBroadcastBinding::Pieces(
    const BucketManifest& manifest) const {
  if (adapter_.format_ == BucketFormat::kFlattened) {
    return std::vector<BroadcastPiece>{BroadcastPiece{0, manifest.span_bytes(), DType::kUint8}};
  }
  std::vector<BroadcastPiece> pieces;
  for (const TensorEntry& t : manifest.tensors) {
    pieces.push_back(BroadcastPiece{t.offset, t.length / DTypeSize(t.dtype), t.dtype});
  }
  return pieces;
}

absl::Status SglangBroadcastBinding::ProbeServer(const nlohmann::json& info) {
  const nlohmann::json& version = info["version"];
  std::lock_guard<std::mutex> lock(adapter_.mu_);
  adapter_.version_text_ =
      version.is_string() ? SanitizePeerText(version.get<std::string>(), kMaxVersionBytes) : "";
  return absl::OkStatus();
}

void SglangBroadcastBinding::AddHealth(const nlohmann::json& /*info*/, EngineHealth* health) const {
  health->variant = absl::StrCat("nccl ", BucketFormatName(adapter_.format_));
}

absl::Status SglangBroadcastBinding::ValidateBucket(const BucketManifest& manifest) const {
  return adapter_.ValidateTensorLayout(manifest);
}

}  // namespace wsync
