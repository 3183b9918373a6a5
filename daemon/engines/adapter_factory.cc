#include "daemon/engines/adapter_factory.h"

#include "absl/strings/str_cat.h"
#include "daemon/engines/engine_options.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/engines/sglang/sglang_options.h"

namespace wsync {

absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeEngineAdapter(const GroupSpec& spec,
                                                                 const EngineEndpoint& endpoint,
                                                                 const AdapterTimeouts& timeouts) {
  if (spec.kind != EngineKind::kSglang) return EngineKindNotSupported(spec.kind);
  const auto* options = dynamic_cast<const SglangOptions*>(spec.engine_options.get());
  if (options == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': sglang engines need sglang options"));
  }
  return std::make_unique<SglangAdapter>(endpoint, timeouts, *options, spec.transport);
}

}  // namespace wsync
