#include "daemon/service/group_spec_json.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/service/config_json.h"

namespace wsync {

absl::StatusOr<GroupSpec> GroupSpecFromJson(const nlohmann::json& g, const std::string& path) {
  using namespace config_json;  // NOLINT(build/namespaces): the config's readers
  WSYNC_RETURN_IF_ERROR(RequireObject(g, path));
  GroupSpec spec;
  WSYNC_ASSIGN_OR_RETURN(const nlohmann::json* name, Required(g, "name", path));
  WSYNC_ASSIGN_OR_RETURN(spec.name, AsString(*name, Member(path, "name")));
  spec.kind = "sglang";
  if (g.contains("kind")) {
    WSYNC_ASSIGN_OR_RETURN(spec.kind, AsString(g["kind"], Member(path, "kind")));
  }
  if (absl::Status known = EngineKinds().Find(spec.kind).status(); !known.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Member(path, "kind"), ": ", known.message()));
  }
  // A misspelt key would otherwise leave an option at its default without a word. The engine's
  // own options sit under its kind's name: {"sglang": {"load_format": ...}}.
  const std::vector<std::string> kinds = EngineKinds().Names();
  for (const auto& [key, value] : g.items()) {
    const bool a_kind = std::find(kinds.begin(), kinds.end(), key) != kinds.end();
    if (a_kind && key != spec.kind) {
      return absl::InvalidArgumentError(absl::StrCat(Member(path, key), ": group '", spec.name,
                                                     "' is of kind ", spec.kind, ", not ", key));
    }
  }
  if (g.contains("load_format") && spec.kind != "sglang") {
    return absl::InvalidArgumentError(
        absl::StrCat(Member(path, "load_format"), ": goes under \"", spec.kind, "\" for a ",
                     spec.kind, " group (the top-level form is an old sglang one)"));
  }
  std::vector<std::string> keys = {"name",     "kind",          "transport", "device", "engines",
                                   "nccl_lib", "check_weights", "quorum",    spec.kind};
  if (spec.kind == "sglang") keys.push_back("load_format");
  WSYNC_RETURN_IF_ERROR(CheckKeys(g, path, keys));
  // A transport's alias ("nccl") is stored as its name, so that specs compare equal.
  std::string transport_name = "broadcast";
  if (g.contains("transport")) {
    WSYNC_ASSIGN_OR_RETURN(transport_name, AsString(g["transport"], Member(path, "transport")));
  }
  const absl::StatusOr<const TransportKind*> transport = TransportKinds().Find(transport_name);
  if (!transport.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Member(path, "transport"), ": ", transport.status().message()));
  }
  spec.transport = std::string((*transport)->name());
  if (g.contains("device")) {
    WSYNC_ASSIGN_OR_RETURN(spec.device, AsInteger(g["device"], Member(path, "device"), 0,
                                                  std::numeric_limits<int32_t>::max()));
  }
  if (g.contains("nccl_lib")) {
    WSYNC_ASSIGN_OR_RETURN(spec.nccl_library, AsString(g["nccl_lib"], Member(path, "nccl_lib")));
  }
  if (g.contains("check_weights")) {
    WSYNC_ASSIGN_OR_RETURN(spec.check_weights,
                           AsBool(g["check_weights"], Member(path, "check_weights")));
  }
  if (g.contains("quorum")) {
    WSYNC_ASSIGN_OR_RETURN(spec.quorum, AsInteger(g["quorum"], Member(path, "quorum"), 0,
                                                  std::numeric_limits<uint32_t>::max()));
  }
  WSYNC_ASSIGN_OR_RETURN(const nlohmann::json* engines, Required(g, "engines", path));
  if (!engines->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Member(path, "engines"), " must be a list of engines, not ", Describe(*engines)));
  }
  for (size_t i = 0; i < engines->size(); ++i) {
    const nlohmann::json& e = (*engines)[i];
    const std::string at = Element(Member(path, "engines"), i);
    WSYNC_RETURN_IF_ERROR(RequireObject(e, at));
    WSYNC_RETURN_IF_ERROR(CheckKeys(e, at, {"url", "ranks", "gpus"}));
    WSYNC_ASSIGN_OR_RETURN(const nlohmann::json* url, Required(e, "url", at));
    EngineSpec engine{"", 1};
    WSYNC_ASSIGN_OR_RETURN(engine.url, AsString(*url, Member(at, "url")));
    if (e.contains("ranks")) {
      WSYNC_ASSIGN_OR_RETURN(engine.ranks, AsInteger(e["ranks"], Member(at, "ranks"), 0,
                                                     std::numeric_limits<uint32_t>::max()));
    }
    if (e.contains("gpus")) {
      WSYNC_ASSIGN_OR_RETURN(engine.gpus, AsStrings(e["gpus"], Member(at, "gpus")));
    }
    spec.engines.push_back(std::move(engine));
  }
  nlohmann::json options = g.value(spec.kind, nlohmann::json::object());
  // SGLang's load_format at the group's top level is the form of config files older than the
  // per-kind options: still read, not both, and each use logged as deprecated.
  if (g.contains("load_format")) {
    if (options.is_object() && options.contains("load_format")) {
      return absl::InvalidArgumentError(
          absl::StrCat(Member(path, "load_format"), ": given twice (here and under \"sglang\")"));
    }
    WSYNC_LOG(Warning, "group ", spec.name,
              ": a top-level \"load_format\" is deprecated; put it under \"sglang\"");
    if (options.is_object()) options["load_format"] = g["load_format"];
  }
  // The kind reads its own options; its errors are placed by the path, which names the group.
  if (!options.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(Member(path, spec.kind),
                                                   " must be an object of ", spec.kind,
                                                   " options, not ", Describe(options)));
  }
  auto parsed = (*EngineKinds().Find(spec.kind))->ParseOptions(options);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(Member(path, spec.kind), ": ", parsed.status().message()));
  }
  spec.engine_options = *std::move(parsed);
  return spec;
}

nlohmann::json GroupSpecToJson(const GroupSpec& spec) {
  nlohmann::json engines = nlohmann::json::array();
  for (const EngineSpec& e : spec.engines) {
    nlohmann::json engine = {{"url", e.url}, {"ranks", e.ranks}};
    if (!e.gpus.empty()) engine["gpus"] = e.gpus;
    engines.push_back(std::move(engine));
  }
  nlohmann::json j = {{"name", spec.name},
                      {"kind", spec.kind},
                      {"transport", spec.transport},
                      {"device", spec.device},
                      {"engines", std::move(engines)}};
  if (!spec.nccl_library.empty()) j["nccl_lib"] = spec.nccl_library;
  if (spec.check_weights) j["check_weights"] = true;
  if (spec.quorum != 0) j["quorum"] = spec.quorum;
  if (auto options = EngineOptionsToJson(spec); options.ok()) j[spec.kind] = *std::move(options);
  return j;
}

}  // namespace wsync
