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

std::unique_ptr<EngineAdapter> MakeEngineAdapter(EngineKind kind, EngineEndpoint endpoint,
                                                 AdapterTimeouts timeouts) {
  if (kind == EngineKind::kSglang) {
    return std::make_unique<SglangAdapter>(std::move(endpoint), timeouts);
  }
  return nullptr;
}

}  // namespace wsync
