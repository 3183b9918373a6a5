// The vLLM engine kind (engine_kind.h): its options as JSON, and its adapter.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/engines/vllm/vllm_adapter.h"
#include "daemon/engines/vllm/vllm_options.h"

namespace wsync {
namespace {

class VllmKind final : public EngineKindPlugin {
 public:
  absl::string_view name() const override { return "vllm"; }

  // {"packed": bool, "pause_mode": "keep" | "wait" | "abort", "wake_weights": bool,
  //  "reset_prefix_cache": bool, "rendezvous": "store" | "unique-id", "packed_chunk_bytes": int,
  //  "engine_version": "MAJOR.MINOR.PATCH"},
  // every key optional (VllmOptions' defaults).
  absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const override {
    const VllmOptions defaults;
    bool packed = defaults.packed();
    bool wake_weights = defaults.wake_weights();
    bool reset_prefix_cache = defaults.reset_prefix_cache();
    VllmPauseMode pause_mode = defaults.pause_mode();
    VllmRendezvous rendezvous = defaults.rendezvous();
    uint64_t chunk_bytes = defaults.packed_chunk_bytes();
    std::string engine_version;
    for (const auto& [key, value] : options.items()) {
      bool* flag = key == "packed"               ? &packed
                   : key == "wake_weights"       ? &wake_weights
                   : key == "reset_prefix_cache" ? &reset_prefix_cache
                                                 : nullptr;
      if (flag != nullptr) {
        if (!value.is_boolean()) {
          return absl::InvalidArgumentError(
              absl::StrCat("vllm option \"", key, "\" must be true or false"));
        }
        *flag = value.get<bool>();
      } else if (key == "pause_mode") {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(
              "vllm option \"pause_mode\" must be keep, wait or abort");
        }
        WSYNC_ASSIGN_OR_RETURN(pause_mode, ParseVllmPauseMode(value.get<std::string>()));
      } else if (key == "rendezvous") {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(
              "vllm option \"rendezvous\" must be store or unique-id");
        }
        WSYNC_ASSIGN_OR_RETURN(rendezvous, ParseVllmRendezvous(value.get<std::string>()));
      } else if (key == "packed_chunk_bytes") {
        if (!value.is_number_unsigned() || value.get<uint64_t>() == 0) {
          return absl::InvalidArgumentError(
              "vllm option \"packed_chunk_bytes\" must be a positive integer");
        }
        chunk_bytes = value.get<uint64_t>();
      } else if (key == "engine_version") {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(
              "vllm option \"engine_version\" must be a release as MAJOR.MINOR.PATCH");
        }
        WSYNC_RETURN_IF_ERROR(ParseEngineVersionOption("vllm", value.get<std::string>()).status());
        engine_version = value.get<std::string>();
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unknown vllm option \"", key, "\""));
      }
    }
    return std::make_shared<const VllmOptions>(packed, pause_mode, wake_weights, reset_prefix_cache,
                                               rendezvous, chunk_bytes, engine_version);
  }

  nlohmann::json OptionsToJson(const EngineOptions& options) const override {
    const auto& vllm = static_cast<const VllmOptions&>(options);
    nlohmann::json j = {{"packed", vllm.packed()},
                        {"pause_mode", std::string(VllmPauseModeName(vllm.pause_mode()))},
                        {"wake_weights", vllm.wake_weights()},
                        {"reset_prefix_cache", vllm.reset_prefix_cache()},
                        {"rendezvous", std::string(VllmRendezvousName(vllm.rendezvous()))},
                        {"packed_chunk_bytes", vllm.packed_chunk_bytes()}};
    if (!vllm.engine_version().empty()) j["engine_version"] = vllm.engine_version();
    return j;
  }

  absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapter(
      const GroupSpec& spec, const EngineEndpoint& endpoint,
      const AdapterTimeouts& timeouts) const override {
    return MakeAdapterWith<VllmAdapter, VllmOptions>(spec, endpoint, timeouts);
  }
};

}  // namespace

std::unique_ptr<EngineKindPlugin> MakeVllmEngineKind() { return std::make_unique<VllmKind>(); }

}  // namespace wsync
