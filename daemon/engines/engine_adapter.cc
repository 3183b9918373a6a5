#include "daemon/engines/engine_adapter.h"

#include "absl/strings/str_cat.h"
#include "daemon/engines/sglang_adapter.h"

namespace wsync {

absl::StatusOr<EngineKind> ParseEngineKind(absl::string_view name) {
  if (name == "sglang") return EngineKind::kSglang;
  if (name == "vllm") return EngineKind::kVllm;
  if (name == "lmdeploy") return EngineKind::kLmdeploy;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown engine kind '", name, "' (sglang, vllm, lmdeploy)"));
}

absl::string_view EngineKindName(EngineKind kind) {
  switch (kind) {
    case EngineKind::kSglang:
      return "sglang";
    case EngineKind::kVllm:
      return "vllm";
    case EngineKind::kLmdeploy:
      return "lmdeploy";
  }
  return "unknown";
}

absl::StatusOr<BucketFormat> ParseBucketFormat(absl::string_view name) {
  if (name == "flattened_bucket") return BucketFormat::kFlattened;
  if (name == "per_tensor") return BucketFormat::kPerTensor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown bucket format '", name, "' (flattened_bucket, per_tensor)"));
}

absl::string_view BucketFormatName(BucketFormat format) {
  return format == BucketFormat::kFlattened ? "flattened_bucket" : "per_tensor";
}

std::unique_ptr<EngineAdapter> MakeEngineAdapter(EngineKind kind, EngineEndpoint endpoint,
                                                 AdapterTimeouts timeouts, BucketFormat format) {
  if (kind == EngineKind::kSglang) {
    return std::make_unique<SglangAdapter>(std::move(endpoint), timeouts, format);
  }
  return nullptr;
}

}  // namespace wsync
