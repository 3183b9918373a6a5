// The LMDeploy engine kind (engine_kind.h): its options as JSON, and its adapter.
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"

namespace wsync {
namespace {

class LmdeployKind final : public EngineKindPlugin {
 public:
  absl::string_view name() const override { return "lmdeploy"; }

  // {"load_format": "flattened_bucket" | "per_tensor"}, optional.
  absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const override {
    for (const auto& [key, value] : options.items()) {
      if (key != "load_format") {
        return absl::InvalidArgumentError(absl::StrCat("unknown lmdeploy option \"", key, "\""));
      }
    }
    const nlohmann::json format = options.value("load_format", nlohmann::json("flattened_bucket"));
    if (!format.is_string()) {
      return absl::InvalidArgumentError(
          "lmdeploy load_format must be \"flattened_bucket\" or \"per_tensor\"");
    }
    WSYNC_ASSIGN_OR_RETURN(BucketFormat parsed, ParseBucketFormat(format.get<std::string>()));
    return std::make_shared<const LmdeployOptions>(parsed);
  }

  nlohmann::json OptionsToJson(const EngineOptions& options) const override {
    const auto& lmdeploy = static_cast<const LmdeployOptions&>(options);
    return {{"load_format", std::string(LmdeployLoadFormatName(lmdeploy.load_format()))}};
  }

  absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapter(
      const GroupSpec& spec, const EngineEndpoint& endpoint,
      const AdapterTimeouts& timeouts) const override {
    return MakeAdapterWith<LmdeployAdapter, LmdeployOptions>(spec, endpoint, timeouts);
  }
};

}  // namespace

std::unique_ptr<EngineKindPlugin> MakeLmdeployEngineKind() {
  return std::make_unique<LmdeployKind>();
}

}  // namespace wsync
