// The SGLang engine kind (engine_kind.h): its options as JSON, and its adapter.
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/engines/sglang/sglang_options.h"

namespace wsync {
namespace {

// A string option, parsed by `parse`; errors name the key and the values it takes.
template <typename Parse>
auto StringOption(const nlohmann::json& options, const char* key, const char* fallback,
                  const char* values, Parse parse) -> decltype(parse("")) {
  const nlohmann::json value = options.value(key, nlohmann::json(fallback));
  if (!value.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("sglang ", key, " must be ", values));
  }
  return parse(value.get<std::string>());
}

class SglangKind final : public EngineKindPlugin {
 public:
  absl::string_view name() const override { return "sglang"; }

  // {"load_format": "flattened_bucket" | "per_tensor", "memory": "keep" | "resume",
  //  "ipc_route": "tensor" | "ipc", "engine_version": "MAJOR.MINOR.PATCH"}, every key optional.
  absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const override {
    for (const auto& [key, value] : options.items()) {
      if (key != "load_format" && key != "memory" && key != "ipc_route" &&
          key != "engine_version") {
        return absl::InvalidArgumentError(absl::StrCat("unknown sglang option \"", key, "\""));
      }
    }
    WSYNC_ASSIGN_OR_RETURN(BucketFormat format,
                           StringOption(options, "load_format", "flattened_bucket",
                                        "\"flattened_bucket\" or \"per_tensor\"",
                                        [](absl::string_view v) { return ParseBucketFormat(v); }));
    WSYNC_ASSIGN_OR_RETURN(SglangMemory memory,
                           StringOption(options, "memory", "keep", "\"keep\" or \"resume\"",
                                        [](absl::string_view v) { return ParseSglangMemory(v); }));
    WSYNC_ASSIGN_OR_RETURN(
        SglangIpcRoute route,
        StringOption(options, "ipc_route", "tensor", "\"tensor\" or \"ipc\"",
                     [](absl::string_view v) { return ParseSglangIpcRoute(v); }));
    WSYNC_ASSIGN_OR_RETURN(
        std::string engine_version,
        StringOption(options, "engine_version", "", "a release as MAJOR.MINOR.PATCH",
                     [](absl::string_view v) -> absl::StatusOr<std::string> {
                       if (v.empty()) return std::string();
                       WSYNC_RETURN_IF_ERROR(ParseEngineVersionOption("sglang", v).status());
                       return std::string(v);
                     }));
    return std::make_shared<const SglangOptions>(format, memory, route, engine_version);
  }

  nlohmann::json OptionsToJson(const EngineOptions& options) const override {
    const auto& sglang = static_cast<const SglangOptions&>(options);
    nlohmann::json j = {{"load_format", std::string(BucketFormatName(sglang.load_format()))}};
    if (sglang.memory() != SglangMemory::kKeep) {
      j["memory"] = std::string(SglangMemoryName(sglang.memory()));
    }
    if (sglang.ipc_route() != SglangIpcRoute::kTensor) {
      j["ipc_route"] = std::string(SglangIpcRouteName(sglang.ipc_route()));
    }
    if (!sglang.engine_version().empty()) j["engine_version"] = sglang.engine_version();
    return j;
  }

  absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapter(
      const GroupSpec& spec, const EngineEndpoint& endpoint,
      const AdapterTimeouts& timeouts) const override {
    return MakeAdapterWith<SglangAdapter, SglangOptions>(spec, endpoint, timeouts);
  }
};

}  // namespace

std::unique_ptr<EngineKindPlugin> MakeSglangEngineKind() { return std::make_unique<SglangKind>(); }

}  // namespace wsync
