#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/engines/engine_kind.h"

namespace wsync {

absl::Status EngineRegistry::Register(std::unique_ptr<EngineKindPlugin> kind) {
  const std::string name(kind->name());
  if (!kinds_.emplace(name, std::move(kind)).second) {
    return absl::AlreadyExistsError(absl::StrCat("engine kind '", name, "' is registered twice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const EngineKindPlugin*> EngineRegistry::Find(absl::string_view name) const {
  auto it = kinds_.find(name);
  if (it == kinds_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown engine kind '", name, "' (", absl::StrJoin(Names(), ", "), ")"));
  }
  return it->second.get();
}

std::vector<std::string> EngineRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, kind] : kinds_) names.push_back(name);
  return names;
}

EngineRegistry& EngineKinds() {
  static EngineRegistry* registry = new EngineRegistry();
  return *registry;
}

absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeRegisteredAdapter(
    const GroupSpec& spec, const EngineEndpoint& endpoint, const AdapterTimeouts& timeouts) {
  auto found = EngineKinds().Find(spec.kind);
  if (!found.ok()) return found.status();
  return (*found)->MakeAdapter(spec, endpoint, timeouts);
}

absl::StatusOr<std::shared_ptr<const EngineOptions>> DefaultEngineOptions(absl::string_view kind) {
  auto found = EngineKinds().Find(kind);
  if (!found.ok()) return found.status();
  return (*found)->ParseOptions(nlohmann::json::object());
}

absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseEngineOptions(
    absl::string_view kind, const nlohmann::json& options, absl::string_view group) {
  auto found = EngineKinds().Find(kind);
  if (!found.ok()) return found.status();
  if (!options.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", group, "': \"", kind, "\" options must be an object"));
  }
  auto parsed = (*found)->ParseOptions(options);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat("group '", group, "': ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<nlohmann::json> EngineOptionsToJson(const GroupSpec& spec) {
  auto found = EngineKinds().Find(spec.kind);
  if (!found.ok()) return found.status();
  if (spec.engine_options == nullptr) return nlohmann::json::object();
  return (*found)->OptionsToJson(*spec.engine_options);
}

}  // namespace wsync
