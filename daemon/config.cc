#include "daemon/config.h"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/engine_options.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/vllm/vllm_options.h"

namespace wsync {

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  double value = 0;
  if (i == 0 || !absl::SimpleAtod(s.substr(0, i), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte size"));
  }
  std::string unit = s.substr(i);
  uint64_t mult = 1;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kib" || unit == "kb") {
    mult = 1ull << 10;
  } else if (unit == "m" || unit == "mib" || unit == "mb") {
    mult = 1ull << 20;
  } else if (unit == "g" || unit == "gib" || unit == "gb") {
    mult = 1ull << 30;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': unknown unit '", unit, "' (use KiB, MiB or GiB)"));
  }
  // 2^64 bytes and more do not fit: converting such a double to uint64_t is undefined.
  const double bytes = value * static_cast<double>(mult);
  if (!(bytes < 18446744073709551616.0)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large a byte size"));
  }
  return static_cast<uint64_t>(bytes);
}

namespace {

// A JSON number read as an integer in [min, max]. nlohmann's get<T>() converts 1e30, 2.5 or -1
// as a C++ cast does: undefined for a float T cannot hold, a wrap for a negative unsigned.
absl::StatusOr<int64_t> IntegerValue(const nlohmann::json& value, const std::string& what,
                                     int64_t min, int64_t max) {
  const bool too_large =
      value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max);
  if (!value.is_number_integer() || too_large || value.get<int64_t>() < min ||
      value.get<int64_t>() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an integer from ", min, " to ", max));
  }
  return value.get<int64_t>();
}

// Seconds: a number above zero (a negative timeout would fail everything at once).
absl::StatusOr<absl::Duration> SecondsValue(const nlohmann::json& value, const std::string& what) {
  if (!value.is_number() || !(value.get<double>() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a number of seconds above 0"));
  }
  return absl::Seconds(value.get<double>());
}

// A size given as "512MiB" or as a number of bytes.
absl::StatusOr<uint64_t> ByteSizeValue(const nlohmann::json& value, const std::string& what) {
  if (value.is_string()) return ParseByteSize(value.get<std::string>());
  return IntegerValue(value, what, 0, std::numeric_limits<int64_t>::max());
}

// {"packed": bool, "pause_mode": "keep" | "wait" | "abort", "wake_weights": bool,
//  "reset_prefix_cache": bool, "rendezvous": "store" | "unique-id", "packed_chunk_bytes": int},
// every key optional (VllmOptions' defaults).
absl::StatusOr<std::shared_ptr<const EngineOptions>> VllmOptionsFromJson(
    const nlohmann::json& options, const std::string& group) {
  if (!options.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", group, "': \"vllm\" must be an object"));
  }
  const VllmOptions defaults;
  bool packed = defaults.packed();
  bool wake_weights = defaults.wake_weights();
  bool reset_prefix_cache = defaults.reset_prefix_cache();
  VllmPauseMode pause_mode = defaults.pause_mode();
  VllmRendezvous rendezvous = defaults.rendezvous();
  uint64_t chunk_bytes = defaults.packed_chunk_bytes();
  for (const auto& [key, value] : options.items()) {
    bool* flag = key == "packed"               ? &packed
                 : key == "wake_weights"       ? &wake_weights
                 : key == "reset_prefix_cache" ? &reset_prefix_cache
                                               : nullptr;
    if (flag != nullptr) {
      if (!value.is_boolean()) {
        return absl::InvalidArgumentError(
            absl::StrCat("group '", group, "': vllm option \"", key, "\" must be true or false"));
      }
      *flag = value.get<bool>();
    } else if (key == "pause_mode") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "group '", group, "': vllm option \"pause_mode\" must be keep, wait or abort"));
      }
      WSYNC_ASSIGN_OR_RETURN(pause_mode, ParseVllmPauseMode(value.get<std::string>()));
    } else if (key == "rendezvous") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "group '", group, "': vllm option \"rendezvous\" must be store or unique-id"));
      }
      WSYNC_ASSIGN_OR_RETURN(rendezvous, ParseVllmRendezvous(value.get<std::string>()));
    } else if (key == "packed_chunk_bytes") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "group '", group, "': vllm option \"packed_chunk_bytes\" must be a positive integer"));
      }
      chunk_bytes = value.get<uint64_t>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", group, "': unknown vllm option \"", key, "\""));
    }
  }
  return std::make_shared<const VllmOptions>(packed, pause_mode, wake_weights, reset_prefix_cache,
                                             rendezvous, chunk_bytes);
}

}  // namespace

absl::StatusOr<GroupSpec> GroupSpecFromJson(const nlohmann::json& g) {
  if (!g.is_object()) return absl::InvalidArgumentError("a \"groups\" entry is not an object");
  GroupSpec spec;
  spec.name = g.at("name").get<std::string>();
  // A misspelt key would otherwise leave an option at its default without a word.
  static const std::set<std::string> kKeys = {
      "name", "kind",     "transport",   "device",   "engines",       "sglang",
      "vllm", "lmdeploy", "load_format", "nccl_lib", "check_weights", "quorum"};
  for (const auto& [key, value] : g.items()) {
    if (kKeys.count(key) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': unknown key \"", key, "\""));
    }
  }
  WSYNC_ASSIGN_OR_RETURN(spec.kind, ParseEngineKind(g.value("kind", std::string("sglang"))));
  WSYNC_ASSIGN_OR_RETURN(spec.transport,
                         ParseTransportKind(g.value("transport", std::string("broadcast"))));
  if (g.contains("device")) {
    WSYNC_ASSIGN_OR_RETURN(
        spec.device, IntegerValue(g["device"], absl::StrCat("group '", spec.name, "': device"), 0,
                                  std::numeric_limits<int32_t>::max()));
  }
  if (g.contains("nccl_lib")) spec.nccl_library = g.at("nccl_lib").get<std::string>();
  if (g.contains("check_weights")) spec.check_weights = g.at("check_weights").get<bool>();
  if (g.contains("quorum")) {
    WSYNC_ASSIGN_OR_RETURN(
        spec.quorum, IntegerValue(g["quorum"], absl::StrCat("group '", spec.name, "': quorum"), 0,
                                  std::numeric_limits<uint32_t>::max()));
  }
  for (const auto& e : g.at("engines")) {
    EngineSpec engine{e.at("url").get<std::string>(), 1};
    if (e.contains("ranks")) {
      WSYNC_ASSIGN_OR_RETURN(
          engine.ranks, IntegerValue(e.at("ranks"), absl::StrCat("engine ", engine.url, ": ranks"),
                                     0, std::numeric_limits<uint32_t>::max()));
    }
    if (e.contains("gpus")) {
      const nlohmann::json& gpus = e.at("gpus");
      if (!gpus.is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat("engine ", engine.url, ": gpus must be a list of GPU UUIDs"));
      }
      for (const nlohmann::json& gpu : gpus) {
        if (!gpu.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("engine ", engine.url, ": gpus must be a list of GPU UUIDs"));
        }
        engine.gpus.push_back(gpu.get<std::string>());
      }
    }
    spec.engines.push_back(std::move(engine));
  }
  // The engine's own options sit under its kind's name: {"sglang": {"load_format": ...}}.
  for (const char* kind : {"sglang", "vllm", "lmdeploy"}) {
    if (g.contains(kind) && kind != EngineKindName(spec.kind)) {
      return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' is of kind ",
                                                     EngineKindName(spec.kind), " but has \"", kind,
                                                     "\" options"));
    }
  }
  if (spec.kind == EngineKind::kVllm) {
    if (g.contains("load_format")) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': load_format is an sglang or lmdeploy option"));
    }
    WSYNC_ASSIGN_OR_RETURN(
        spec.engine_options,
        VllmOptionsFromJson(g.value("vllm", nlohmann::json::object()), spec.name));
    return spec;
  }
  const std::string kind(EngineKindName(spec.kind));
  // SGLang's load_format may also be given at the group's top level, where config files before
  // the per-engine options put it; not both. Other engines' options only sit under their kind.
  if (g.contains("load_format") && spec.kind != EngineKind::kSglang) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", spec.name, "': load_format goes under \"", kind, "\" for a ", kind, " group"));
  }
  if (g.contains("load_format") && g.contains("sglang") && g["sglang"].contains("load_format")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", spec.name, "': load_format is given twice (top level and under \"sglang\")"));
  }
  nlohmann::json options = g.value(kind, nlohmann::json::object());
  if (!options.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': \"", kind, "\" must be an object"));
  }
  for (const auto& [key, value] : options.items()) {
    if (key != "load_format" &&
        !((key == "memory" || key == "ipc_route") && spec.kind == EngineKind::kSglang)) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': unknown ", kind, " option \"", key, "\""));
    }
  }
  const std::string format_name =
      g.contains("load_format") ? g["load_format"].get<std::string>()
                                : options.value("load_format", std::string("flattened_bucket"));
  WSYNC_ASSIGN_OR_RETURN(BucketFormat format, ParseBucketFormat(format_name));
  if (spec.kind == EngineKind::kLmdeploy) {
    spec.engine_options = std::make_shared<const LmdeployOptions>(format);
  } else {
    const nlohmann::json memory = options.value("memory", nlohmann::json("keep"));
    if (!memory.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': sglang memory must be \"keep\" or \"resume\""));
    }
    auto parsed = ParseSglangMemory(memory.get<std::string>());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': ", parsed.status().message()));
    }
    const nlohmann::json route = options.value("ipc_route", nlohmann::json("tensor"));
    if (!route.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': sglang ipc_route must be \"tensor\" or \"ipc\""));
    }
    auto parsed_route = ParseSglangIpcRoute(route.get<std::string>());
    if (!parsed_route.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': ", parsed_route.status().message()));
    }
    spec.engine_options = std::make_shared<const SglangOptions>(format, *parsed, *parsed_route);
  }
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
                      {"kind", std::string(EngineKindName(spec.kind))},
                      {"transport", std::string(TransportKindName(spec.transport))},
                      {"device", spec.device},
                      {"engines", std::move(engines)}};
  if (!spec.nccl_library.empty()) j["nccl_lib"] = spec.nccl_library;
  if (spec.check_weights) j["check_weights"] = true;
  if (spec.quorum != 0) j["quorum"] = spec.quorum;
  if (const auto* sglang = dynamic_cast<const SglangOptions*>(spec.engine_options.get())) {
    j["sglang"] = {{"load_format", std::string(BucketFormatName(sglang->load_format()))}};
    if (sglang->memory() != SglangMemory::kKeep) {
      j["sglang"]["memory"] = std::string(SglangMemoryName(sglang->memory()));
    }
    if (sglang->ipc_route() != SglangIpcRoute::kTensor) {
      j["sglang"]["ipc_route"] = std::string(SglangIpcRouteName(sglang->ipc_route()));
    }
  }
  if (const auto* lmdeploy = dynamic_cast<const LmdeployOptions*>(spec.engine_options.get())) {
    j["lmdeploy"] = {{"load_format", std::string(LmdeployLoadFormatName(lmdeploy->load_format()))}};
  }
  if (const auto* vllm = dynamic_cast<const VllmOptions*>(spec.engine_options.get())) {
    j["vllm"] = {{"packed", vllm->packed()},
                 {"pause_mode", std::string(VllmPauseModeName(vllm->pause_mode()))},
                 {"wake_weights", vllm->wake_weights()},
                 {"reset_prefix_cache", vllm->reset_prefix_cache()},
                 {"rendezvous", std::string(VllmRendezvousName(vllm->rendezvous()))},
                 {"packed_chunk_bytes", vllm->packed_chunk_bytes()}};
  }
  return j;
}

absl::Status LoadConfigFile(const std::string& path, DaemonConfig* config) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return LoadConfigText(text.str(), path, config);
}

absl::Status LoadConfigText(absl::string_view text, const std::string& path, DaemonConfig* config) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false, /*ignore_comments=*/true);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  static const std::set<std::string> kKeys = {"socket",
                                              "listen",
                                              "socket_group",
                                              "admin_group",
                                              "tls_cert",
                                              "tls_key",
                                              "token_file",
                                              "admin_token_file",
                                              "insecure_listen",
                                              "max_streams_per_connection",
                                              "max_streams_per_caller",
                                              "stream_idle_timeout_s",
                                              "handshake_timeout_s",
                                              "mode",
                                              "slots",
                                              "slot_bytes",
                                              "bucket_timeout_s",
                                              "checksum",
                                              "release_idle_slots",
                                              "lease_s",
                                              "control_timeout_s",
                                              "advertise_address",
                                              "bind_address",
                                              "ipc_socket_dir",
                                              "log_level",
                                              "groups",
                                              "engine_networks",
                                              "state_dir",
                                              "metrics_listen",
                                              "log_format",
                                              "log_repeat_seconds"};
  for (const auto& [key, value] : j.items()) {
    if (kKeys.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key \"", key, "\""));
    }
  }
  try {
    if (j.contains("engine_networks")) {
      if (!j["engine_networks"].is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": engine_networks must be a list of hosts and networks"));
      }
      std::vector<std::string> entries = j["engine_networks"].get<std::vector<std::string>>();
      if (auto parsed = NetworkAllowList::Parse(entries); !parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": engine_networks: ", parsed.status().message()));
      }
      config->engine_networks = std::move(entries);
    }
    if (j.contains("socket")) config->server.unix_socket = j["socket"].get<std::string>();
    if (j.contains("listen")) config->server.tcp_listen = j["listen"].get<std::string>();
    for (auto [key, field] : {std::pair{"socket_group", &config->server.socket_group},
                              std::pair{"admin_group", &config->server.admin_group},
                              std::pair{"tls_cert", &config->server.tls_cert_file},
                              std::pair{"tls_key", &config->server.tls_key_file},
                              std::pair{"token_file", &config->server.token_file},
                              std::pair{"admin_token_file", &config->server.admin_token_file}}) {
      if (j.contains(key)) *field = j[key].get<std::string>();
    }
    if (j.contains("insecure_listen")) {
      config->server.insecure_listen = j["insecure_listen"].get<bool>();
    }
    if (j.contains("mode")) config->daemon.mode = j["mode"].get<std::string>();
    // The same bounds as the flags'.
    const auto in_file = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
    };
    if (j.contains("slots")) {
      auto slots = IntegerValue(j["slots"], "slots", 1, 64);
      if (!slots.ok()) return in_file(slots.status());
      config->daemon.slots_per_device = static_cast<uint32_t>(*slots);
    }
    if (j.contains("slot_bytes")) {
      auto bytes = ByteSizeValue(j["slot_bytes"], "slot_bytes");
      if (!bytes.ok()) return in_file(bytes.status());
      config->daemon.slot_bytes = *bytes;
    }
    for (auto [key, field] :
         {std::pair{"max_streams_per_connection", &config->server.max_streams_per_connection},
          std::pair{"max_streams_per_caller", &config->server.max_streams_per_caller}}) {
      if (!j.contains(key)) continue;
      auto n = IntegerValue(j[key], key, 1, 4096);
      if (!n.ok()) return in_file(n.status());
      *field = static_cast<int>(*n);
    }
    for (auto [key, field] :
         {std::pair{"bucket_timeout_s", &config->daemon.bucket_timeout},
          std::pair{"lease_s", &config->daemon.lease},
          std::pair{"control_timeout_s", &config->daemon.group.timeouts.control},
          std::pair{"stream_idle_timeout_s", &config->server.stream_idle_timeout},
          std::pair{"handshake_timeout_s", &config->server.handshake_timeout}}) {
      if (!j.contains(key)) continue;
      auto seconds = SecondsValue(j[key], key);
      if (!seconds.ok()) return in_file(seconds.status());
      *field = *seconds;
    }
    if (j.contains("checksum")) {
      config->daemon.checksum = j["checksum"].get<std::string>();
      if (config->daemon.checksum != "crc32" && config->daemon.checksum != "none") {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": checksum must be \"crc32\" or \"none\""));
      }
    }
    if (j.contains("release_idle_slots")) {
      if (!j["release_idle_slots"].is_boolean()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": release_idle_slots must be true or false"));
      }
      config->daemon.release_idle_slots = j["release_idle_slots"].get<bool>();
    }
    if (j.contains("advertise_address")) {
      config->daemon.group.transport.advertise_address = j["advertise_address"].get<std::string>();
    }
    if (j.contains("bind_address")) {
      config->daemon.group.transport.bind_address = j["bind_address"].get<std::string>();
    }
    if (j.contains("ipc_socket_dir")) {
      config->daemon.group.transport.ipc_socket_dir = j["ipc_socket_dir"].get<std::string>();
    }
    if (j.contains("log_level")) config->log_level = j["log_level"].get<std::string>();
    if (j.contains("state_dir")) config->state_dir = j["state_dir"].get<std::string>();
    if (j.contains("log_format")) config->log_format = j["log_format"].get<std::string>();
    if (j.contains("log_repeat_seconds")) {
      config->log_repeat_seconds = j["log_repeat_seconds"].get<double>();
    }
    if (j.contains("metrics_listen")) {
      config->metrics_listen = j["metrics_listen"].get<std::string>();
    }
    if (j.contains("groups")) {
      for (const auto& g : j["groups"]) {
        WSYNC_ASSIGN_OR_RETURN(GroupSpec spec, GroupSpecFromJson(g));
        config->groups.push_back(std::move(spec));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<NetworkAllowList> EngineNetworksFor(const DaemonConfig& config) {
  if (config.engine_networks.has_value()) {
    auto list = NetworkAllowList::Parse(*config.engine_networks);
    if (!list.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("engine_networks: ", list.status().message()));
    }
    return list;
  }
  // The operator named these hosts in the config: they are engines.
  NetworkAllowList list = NetworkAllowList::Loopback();
  const HostResolver no_lookup = [](const std::string&) -> absl::StatusOr<std::vector<IpAddress>> {
    return absl::UnavailableError("not looked up");
  };
  for (const GroupSpec& g : config.groups) {
    for (const EngineSpec& e : g.engines) {
      WSYNC_ASSIGN_OR_RETURN(HttpUrl url, ParseHttpUrl(e.url));
      if (list.Check(url.host, no_lookup).ok()) continue;  // 127.0.0.1, say: already in
      if (absl::Status s = list.Add(url.host); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("group '", g.name, "': engine ", e.url, ": ", s.message()));
      }
    }
  }
  return list;
}

}  // namespace wsync
