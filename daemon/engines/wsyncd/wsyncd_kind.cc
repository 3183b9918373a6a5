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

  // {"commit_timeout_seconds": N, "streams": [device, ...], "delta": "auto"|"off"}, each
  // optional.
  absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const override {
    for (const auto& [key, value] : options.items()) {
      if (key != "commit_timeout_seconds" && key != "streams" && key != "delta") {
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
    std::vector<int> streams;
    if (options.contains("streams")) {
      const nlohmann::json& v = options["streams"];
      if (!v.is_array()) {
        return absl::InvalidArgumentError("wsyncd streams must be a list of device indexes");
      }
      for (const nlohmann::json& d : v) {
        if (!d.is_number_integer()) {
          return absl::InvalidArgumentError(
              absl::StrCat("wsyncd streams must be a list of device indexes, not ", d.dump()));
        }
        const int64_t device = d.get<int64_t>();
        if (device < 0 || device > 1023) {
          return absl::InvalidArgumentError(absl::StrCat("wsyncd streams: device ", device,
                                                         " is not a device index (0 to 1023)"));
        }
        streams.push_back(static_cast<int>(device));
      }
    }
    bool deltas = true;
    if (options.contains("delta")) {
      const nlohmann::json& v = options["delta"];
      if (!v.is_string() || (v != "auto" && v != "off")) {
        return absl::InvalidArgumentError(
            absl::StrCat("wsyncd delta must be \"auto\" or \"off\", not ", v.dump()));
      }
      deltas = v == "auto";
    }
    auto parsed = std::make_shared<const WsyncdOptions>(timeout, std::move(streams), deltas);
    if (absl::Status s = parsed->Validate(); !s.ok()) return s;
    return parsed;
  }

  nlohmann::json OptionsToJson(const EngineOptions& options) const override {
    const auto& wsyncd = static_cast<const WsyncdOptions&>(options);
    nlohmann::json out = {
        {"commit_timeout_seconds", absl::ToDoubleSeconds(wsyncd.commit_timeout())}};
    if (!wsyncd.stream_devices().empty()) out["streams"] = wsyncd.stream_devices();
    out["delta"] = wsyncd.deltas() ? "auto" : "off";
    return out;
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
