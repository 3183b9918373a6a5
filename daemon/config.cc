#include "daemon/config.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"
#include "daemon/engines/builtin_engine_kinds.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/transport/builtin_transport_kinds.h"

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

}  // namespace

absl::StatusOr<GroupSpec> GroupSpecFromJson(const nlohmann::json& g) {
  if (!g.is_object()) return absl::InvalidArgumentError("a \"groups\" entry is not an object");
  // The kinds a config names are the built-in ones (registered once per process).
  RegisterBuiltinEngineKinds();
  GroupSpec spec;
  spec.name = g.at("name").get<std::string>();
  spec.kind = g.value("kind", std::string("sglang"));
  WSYNC_RETURN_IF_ERROR(EngineKinds().Find(spec.kind).status());
  // A misspelt key would otherwise leave an option at its default without a word. The engine's
  // own options sit under its kind's name: {"sglang": {"load_format": ...}}.
  static const std::set<std::string> kKeys = {"name",     "kind",          "transport",
                                              "device",   "engines",       "load_format",
                                              "nccl_lib", "check_weights", "quorum"};
  const std::vector<std::string> kinds = EngineKinds().Names();
  for (const auto& [key, value] : g.items()) {
    const bool a_kind = std::find(kinds.begin(), kinds.end(), key) != kinds.end();
    if (a_kind && key != spec.kind) {
      return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' is of kind ",
                                                     spec.kind, " but has \"", key, "\" options"));
    }
    if (!a_kind && kKeys.count(key) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': unknown key \"", key, "\""));
    }
  }
  // A transport's alias ("nccl") is stored as its name, so that specs compare equal.
  RegisterBuiltinTransportKinds();
  const absl::StatusOr<const TransportKind*> transport =
      TransportKinds().Find(g.value("transport", std::string("broadcast")));
  if (!transport.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': ", transport.status().message()));
  }
  spec.transport = std::string((*transport)->name());
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
  nlohmann::json options = g.value(spec.kind, nlohmann::json::object());
  // SGLang's load_format at the group's top level is the form of config files older than the
  // per-kind options: still read, not both, and each use logged as deprecated.
  if (g.contains("load_format")) {
    if (spec.kind != "sglang") {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': load_format goes under \"", spec.kind, "\" for a ",
                       spec.kind, " group (the top-level form is an old sglang one)"));
    }
    if (options.is_object() && options.contains("load_format")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group '", spec.name, "': load_format is given twice (top level and under \"sglang\")"));
    }
    WSYNC_LOG(Warning, "group ", spec.name,
              ": a top-level \"load_format\" is deprecated; put it under \"sglang\"");
    if (options.is_object()) options["load_format"] = g["load_format"];
  }
  WSYNC_ASSIGN_OR_RETURN(spec.engine_options, ParseEngineOptions(spec.kind, options, spec.name));
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
      config->daemon.group.transport.socket_dir = j["ipc_socket_dir"].get<std::string>();
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
