#include "daemon/engines/adapter_factory.h"

#include "absl/strings/str_cat.h"
#include "daemon/engines/engine_options.h"
#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/vllm/vllm_adapter.h"
#include "daemon/engines/vllm/vllm_options.h"

namespace wsync {
namespace {

// The spec's options as the engine's own type; a spec of one kind with another's options is a
// bug of whoever made it.
template <typename Options>
absl::StatusOr<const Options*> OptionsOf(const GroupSpec& spec) {
  const auto* options = dynamic_cast<const Options*>(spec.engine_options.get());
  if (options == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': ", EngineKindName(spec.kind), " engines need ",
                     EngineKindName(spec.kind), " options"));
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeEngineAdapter(const GroupSpec& spec,
                                                                 const EngineEndpoint& endpoint,
                                                                 const AdapterTimeouts& timeouts) {
  switch (spec.kind) {
    case EngineKind::kSglang: {
      auto options = OptionsOf<SglangOptions>(spec);
      if (!options.ok()) return options.status();
      return std::make_unique<SglangAdapter>(endpoint, timeouts, **options, spec.transport);
    }
    case EngineKind::kLmdeploy: {
      auto options = OptionsOf<LmdeployOptions>(spec);
      if (!options.ok()) return options.status();
      return std::make_unique<LmdeployAdapter>(endpoint, timeouts, **options, spec.transport);
    }
    case EngineKind::kVllm: {
      auto options = OptionsOf<VllmOptions>(spec);
      if (!options.ok()) return options.status();
      return std::make_unique<VllmAdapter>(endpoint, timeouts, **options, spec.transport);
    }
  }
  return EngineKindNotSupported(spec.kind);
}

}  // namespace wsync
