#include "daemon/engines/engine_options.h"

#include "absl/strings/str_cat.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/vllm/vllm_options.h"

namespace wsync {

absl::Status EngineKindNotSupported(EngineKind kind) {
  return absl::UnimplementedError(
      absl::StrCat("engine kind ", EngineKindName(kind),
                   " is not supported yet (sglang, vllm and lmdeploy are)"));
}

absl::StatusOr<std::shared_ptr<const EngineOptions>> DefaultEngineOptions(EngineKind kind) {
  if (kind == EngineKind::kSglang) return std::make_shared<const SglangOptions>();
  if (kind == EngineKind::kLmdeploy) return std::make_shared<const LmdeployOptions>();
  if (kind == EngineKind::kVllm) return std::make_shared<const VllmOptions>();
  return EngineKindNotSupported(kind);
}

}  // namespace wsync
