#include "daemon/core/transport_kind.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/network_allow_list.h"

namespace wsync {

absl::Status TransportKind::CheckEngineUrl(const std::string& url) const {
  return ParseHttpUrl(url).status();
}

absl::Status TransportRegistry::Register(std::unique_ptr<TransportKind> kind) {
  const std::string name(kind->name());
  if (name.empty() || kinds_.count(name) != 0 || aliases_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("transport '", name, "' is registered twice"));
  }
  for (const std::string& alias : kind->aliases()) {
    if (alias.empty() || kinds_.count(alias) != 0 || aliases_.count(alias) != 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("transport '", name, "': its alias '", alias, "' is taken"));
    }
  }
  for (const std::string& alias : kind->aliases()) aliases_[alias] = kind.get();
  kinds_[name] = std::move(kind);
  return absl::OkStatus();
}

absl::StatusOr<const TransportKind*> TransportRegistry::Find(absl::string_view name) const {
  if (auto it = kinds_.find(name); it != kinds_.end()) return it->second.get();
  if (auto it = aliases_.find(name); it != aliases_.end()) return it->second;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "' (", absl::StrJoin(Names(), ", "), ")"));
}

std::vector<std::string> TransportRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, kind] : kinds_) names.push_back(name);
  return names;
}

std::vector<const TransportKind*> TransportRegistry::All() const {
  std::vector<const TransportKind*> all;
  for (const auto& [name, kind] : kinds_) all.push_back(kind.get());
  return all;
}

TransportRegistry& TransportKinds() {
  static TransportRegistry* registry = new TransportRegistry();
  return *registry;
}

absl::StatusOr<const TransportKind*> TransportOf(const GroupSpec& spec) {
  return TransportKinds().Find(spec.transport);
}

}  // namespace wsync
