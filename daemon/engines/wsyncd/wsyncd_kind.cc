// The wsyncd engine kind (engine_kind.h): the members of a relay group, downstream daemons
// (docs/RELAY.md).
#include <memory>

#include "absl/strings/str_cat.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/engines/wsyncd/wsyncd_adapter.h"
#include "daemon/engines/wsyncd/wsyncd_options.h"

namespace wsync {
namespace {

class WsyncdKind final : public EngineKindPlugin {
 public:
  absl::string_view name() const override { return "wsyncd"; }

  // {"commit_timeout_seconds": N}, optional.
  absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const override {
    for (const auto& [key, value] : options.items()) {
      if (key != "commit_timeout_seconds") {
        return absl::InvalidArgumentError(absl::StrCat("unknown wsyncd option \"", key, "\""));
      }
    }
    absl::Duration timeout = WsyncdOptions().commit_timeout();
    if (options.contains("commit_timeout_seconds")) {
      const nlohmann::json& v = options["commit_timeout_seconds"];
      if (!v.is_number()) {
        return absl::InvalidArgumentError("wsyncd commit_timeout_seconds must be a number");
      }
      timeout = absl::Seconds(v.get<double>());
    }
    auto parsed = std::make_shared<const WsyncdOptions>(timeout);
    if (absl::Status s = parsed->Validate(); !s.ok()) return s;
    return parsed;
  }

  nlohmann::json OptionsToJson(const EngineOptions& options) const override {
    const auto& wsyncd = static_cast<const WsyncdOptions&>(options);
    return {{"commit_timeout_seconds", absl::ToDoubleSeconds(wsyncd.commit_timeout())}};
  }

  absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapter(
      const GroupSpec& spec, const EngineEndpoint& endpoint,
      const AdapterTimeouts& timeouts) const override {
    const auto* options = dynamic_cast<const WsyncdOptions*>(spec.engine_options.get());
    if (options == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': wsyncd members need wsyncd options"));
    }
    return std::make_unique<WsyncdAdapter>(endpoint, timeouts, *options, spec.name);
  }
};

}  // namespace

std::unique_ptr<EngineKindPlugin> MakeWsyncdEngineKind() { return std::make_unique<WsyncdKind>(); }

}  // namespace wsync
