#ifndef WSYNC_DAEMON_ENGINES_ENGINE_KIND_H_
#define WSYNC_DAEMON_ENGINES_ENGINE_KIND_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/group_spec.h"
#include "nlohmann/json.hpp"

namespace wsync {

// One engine kind as wsyncd knows it: its name, its options and its adapter. Each kind parses
// and writes its own options as one JSON object, the same object the config file holds under the
// kind's name ({"kind": "vllm", "vllm": {...}}), the admin API carries as engine_options_json and
// `wsyncctl create-group --option key=value` builds; nothing outside the kind's folder knows its
// keys. A new kind is a folder under daemon/engines and one line in builtin_engine_kinds.inc.
class EngineKindPlugin {
 public:
  virtual ~EngineKindPlugin() = default;
  // The name groups name it by ("sglang").
  virtual absl::string_view name() const = 0;
  // Its options from their JSON object: every key optional (the defaults fill the rest), an
  // unknown key or a wrong value refused naming the key. Errors do not name the group; callers
  // prefix it.
  virtual absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const = 0;
  // Options of this kind as the JSON object ParseOptions reads back to equal options.
  virtual nlohmann::json OptionsToJson(const EngineOptions& options) const = 0;
  // The adapter of one engine of a group of this kind.
  virtual absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapter(
      const GroupSpec& spec, const EngineEndpoint& endpoint,
      const AdapterTimeouts& timeouts) const = 0;
};

// The engine kinds this wsyncd serves, by name. Filled once at start (RegisterBuiltinEngineKinds
// in daemon/engines/builtin_engine_kinds.h); read-only after, so lookups need no lock.
class EngineRegistry {
 public:
  // Fails if a kind of that name is already registered.
  absl::Status Register(std::unique_ptr<EngineKindPlugin> kind);
  // INVALID_ARGUMENT naming the registered kinds when `name` is none of them.
  absl::StatusOr<const EngineKindPlugin*> Find(absl::string_view name) const;
  // The registered names, sorted.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, std::unique_ptr<EngineKindPlugin>, std::less<>> kinds_;
};

// The process's registry.
EngineRegistry& EngineKinds();

// The adapter of one engine of `spec`, made by the spec's kind: what wsyncd's group factories
// call.
absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeRegisteredAdapter(
    const GroupSpec& spec, const EngineEndpoint& endpoint, const AdapterTimeouts& timeouts);

// A kind's MakeAdapter for an adapter constructed as Adapter(endpoint, timeouts, options) from
// options of type Options; a spec carrying other options is refused. The group picks the data
// path afterwards (EngineAdapter::UseDataPath).
template <typename Adapter, typename Options>
absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapterWith(const GroupSpec& spec,
                                                               const EngineEndpoint& endpoint,
                                                               const AdapterTimeouts& timeouts) {
  const auto* options = dynamic_cast<const Options*>(spec.engine_options.get());
  if (options == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "': ", spec.kind,
                                                   " engines need ", spec.kind, " options"));
  }
  return std::make_unique<Adapter>(endpoint, timeouts, *options);
}

// The kind's default options (its parser given an empty object).
absl::StatusOr<std::shared_ptr<const EngineOptions>> DefaultEngineOptions(absl::string_view kind);
// Options of `kind` from their JSON object; errors name the group.
absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseEngineOptions(
    absl::string_view kind, const nlohmann::json& options, absl::string_view group);
// The spec's options as their JSON object.
absl::StatusOr<nlohmann::json> EngineOptionsToJson(const GroupSpec& spec);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_ENGINE_KIND_H_
