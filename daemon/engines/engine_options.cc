#include "daemon/engines/engine_options.h"

#include "absl/strings/str_cat.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/sglang/sglang_options.h"

namespace wsync {

absl::Status EngineKindNotSupported(EngineKind kind) {
  return absl::UnimplementedError(absl::StrCat("engine kind ", EngineKindName(kind),
                                               " is not supported yet (sglang and lmdeploy are)"));
}

absl::StatusOr<std::shared_ptr<const EngineOptions>> DefaultEngineOptions(EngineKind kind) {
  if (kind == EngineKind::kSglang) return std::make_shared<const SglangOptions>();
  if (kind == EngineKind::kLmdeploy) return std::make_shared<const LmdeployOptions>();
  return EngineKindNotSupported(kind);
}

}  // namespace wsync
