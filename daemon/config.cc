#include "daemon/config.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"
#include "daemon/engines/builtin_engine_kinds.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/service/config_json.h"
#include "daemon/service/group_spec_json.h"
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
  return config_json::AsInteger(value, what, 0, std::numeric_limits<int64_t>::max());
}

}  // namespace

absl::Status LoadConfigFile(const std::string& path, DaemonConfig* config) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return LoadConfigText(text.str(), path, config);
}

absl::Status LoadConfigText(absl::string_view text, const std::string& path, DaemonConfig* config) {
  using namespace config_json;  // NOLINT(build/namespaces): the config's readers
  WSYNC_ASSIGN_OR_RETURN(const nlohmann::json j, Parse(text, path));
  // Every error names the file, then where in it.
  const auto in_file = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  };
  if (absl::Status s = RequireObject(j, ""); !s.ok()) return in_file(s);
  static const std::vector<std::string> kKeys = {"socket",
                                                 "listen",
                                                 "socket_group",
                                                 "admin_group",
                                                 "tls_cert",
                                                 "tls_key",
                                                 "token_file",
                                                 "admin_token_file",
                                                 "relay_tokens",
                                                 "relay_feeds",
                                                 "resident",
                                                 "resident_bytes",
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
  if (absl::Status s = CheckKeys(j, "", kKeys); !s.ok()) return in_file(s);
  // Each string setting and where it goes.
  const std::pair<const char*, std::string*> strings[] = {
      {"socket", &config->server.unix_socket},
      {"listen", &config->server.tcp_listen},
      {"socket_group", &config->server.socket_group},
      {"admin_group", &config->server.admin_group},
      {"tls_cert", &config->server.tls_cert_file},
      {"tls_key", &config->server.tls_key_file},
      {"token_file", &config->server.token_file},
      {"admin_token_file", &config->server.admin_token_file},
      {"mode", &config->daemon.mode},
      {"advertise_address", &config->daemon.group.transport.advertise_address},
      {"bind_address", &config->daemon.group.transport.bind_address},
      {"ipc_socket_dir", &config->daemon.group.transport.socket_dir},
      {"log_level", &config->log_level},
      {"log_format", &config->log_format},
      {"metrics_listen", &config->metrics_listen}};
  for (const auto& [key, field] : strings) {
    if (!j.contains(key)) continue;
    auto value = AsString(j[key], key);
    if (!value.ok()) return in_file(value.status());
    *field = *std::move(value);
  }
  if (j.contains("engine_networks")) {
    auto entries = AsStrings(j["engine_networks"], "engine_networks");
    if (!entries.ok()) return in_file(entries.status());
    if (auto parsed = NetworkAllowList::Parse(*entries); !parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": engine_networks: ", parsed.status().message()));
    }
    config->engine_networks = *std::move(entries);
  }
  if (j.contains("relay_tokens")) {
    // [{"token_file": FILE, "groups": [GROUP, ...], "nodes": [NODE, ...]}] ("nodes" optional):
    // see ServerOptions::relay_token_files.
    const nlohmann::json& list = j["relay_tokens"];
    if (!list.is_array()) {
      return in_file(absl::InvalidArgumentError(
          absl::StrCat("relay_tokens must be a list of objects, not ", Describe(list))));
    }
    config->server.relay_token_files.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = Element("relay_tokens", i);
      if (absl::Status s = RequireObject(list[i], at); !s.ok()) return in_file(s);
      if (absl::Status s = CheckKeys(list[i], at, {"token_file", "groups", "nodes"}); !s.ok()) {
        return in_file(s);
      }
      auto file_json = Required(list[i], "token_file", at);
      if (!file_json.ok()) return in_file(file_json.status());
      auto groups_json = Required(list[i], "groups", at);
      if (!groups_json.ok()) return in_file(groups_json.status());
      auto file = AsString(**file_json, at + ".token_file");
      if (!file.ok()) return in_file(file.status());
      auto groups = AsStrings(**groups_json, at + ".groups");
      if (!groups.ok()) return in_file(groups.status());
      std::vector<std::string> nodes;
      if (list[i].contains("nodes")) {
        auto given = AsStrings(list[i]["nodes"], at + ".nodes");
        if (!given.ok()) return in_file(given.status());
        if (given->empty()) {
          return in_file(absl::InvalidArgumentError(
              absl::StrCat(at,
                           ".nodes is empty: leave it out to let any node the groups name "
                           "use the token")));
        }
        nodes = *std::move(given);
      }
      config->server.relay_token_files.push_back(
          {*std::move(file), *std::move(groups), std::move(nodes)});
    }
  }
  if (j.contains("relay_feeds")) {
    // [{"upstream": "HOST:PORT", "group": G, "token_file": F, "ca_file": C, ...}]: see
    // RelayFeedOptions.
    const nlohmann::json& list = j["relay_feeds"];
    if (!list.is_array()) {
      return in_file(absl::InvalidArgumentError(
          absl::StrCat("relay_feeds must be a list of objects, not ", Describe(list))));
    }
    config->relay_feeds.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = Element("relay_feeds", i);
      if (absl::Status s = RequireObject(list[i], at); !s.ok()) return in_file(s);
      RelayFeedOptions feed;
      for (const auto& [key, value] : list[i].items()) {
        auto text = AsString(value, at + "." + key);
        if (!text.ok()) return in_file(text.status());
        if (absl::Status s = SetRelayFeedKey(key, *text, &feed); !s.ok()) {
          return in_file(absl::InvalidArgumentError(absl::StrCat(at, ": ", s.message())));
        }
      }
      if (absl::Status s = ValidateRelayFeed(feed); !s.ok()) {
        return in_file(absl::InvalidArgumentError(absl::StrCat(at, ": ", s.message())));
      }
      config->relay_feeds.push_back(std::move(feed));
    }
  }
  if (j.contains("resident")) {
    auto text = AsString(j["resident"], "resident");
    if (!text.ok()) return in_file(text.status());
    auto medium = ParseResidentMedium(*text);
    if (!medium.ok()) return in_file(medium.status());
    config->resident.medium = *medium;
  }
  if (j.contains("resident_bytes")) {
    auto bytes = ByteSizeValue(j["resident_bytes"], "resident_bytes");
    if (!bytes.ok()) return in_file(bytes.status());
    config->resident.cap_bytes = *bytes;
  }
  if (j.contains("insecure_listen")) {
    auto insecure = AsBool(j["insecure_listen"], "insecure_listen");
    if (!insecure.ok()) return in_file(insecure.status());
    config->server.insecure_listen = *insecure;
  }
  // The same bounds as the flags'.
  if (j.contains("slots")) {
    auto slots = config_json::AsInteger(j["slots"], "slots", 1, 64);
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
    auto n = config_json::AsInteger(j[key], key, 1, 4096);
    if (!n.ok()) return in_file(n.status());
    *field = static_cast<int>(*n);
  }
  for (auto [key, field] : {std::pair{"bucket_timeout_s", &config->daemon.bucket_timeout},
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
    auto checksum = AsString(j["checksum"], "checksum");
    if (!checksum.ok()) return in_file(checksum.status());
    if (*checksum != "auto" && !ParseChecksumKind(*checksum).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       ": checksum must be \"auto\", \"crc32\", \"crc32-sampled\" or "
                       "\"none\", not \"",
                       *checksum, "\""));
    }
    config->daemon.checksum = *checksum;
  }
  if (j.contains("release_idle_slots")) {
    auto release = AsBool(j["release_idle_slots"], "release_idle_slots");
    if (!release.ok()) return in_file(release.status());
    config->daemon.release_idle_slots = *release;
  }
  if (j.contains("state_dir")) {
    auto dir = AsString(j["state_dir"], "state_dir");
    if (!dir.ok()) return in_file(dir.status());
    config->state_dir = *std::move(dir);
  }
  if (j.contains("log_repeat_seconds")) {
    auto seconds = AsNumber(j["log_repeat_seconds"], "log_repeat_seconds");
    if (!seconds.ok()) return in_file(seconds.status());
    config->log_repeat_seconds = *seconds;
  }
  if (j.contains("groups")) {
    // The kinds a config names are the built-in ones (registered once per process).
    RegisterBuiltinEngineKinds();
    RegisterBuiltinTransportKinds();
    const nlohmann::json& groups = j["groups"];
    if (!groups.is_array()) {
      return in_file(absl::InvalidArgumentError(
          absl::StrCat("groups must be a list of groups, not ", Describe(groups))));
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      absl::StatusOr<GroupSpec> spec;
      try {
        spec = GroupSpecFromJson(groups[i], Element("groups", i));
      } catch (const nlohmann::json::exception& e) {
        // A kind's options reader that let the JSON library throw: still no crash.
        spec = absl::InvalidArgumentError(absl::StrCat(Element("groups", i), ": ", e.what()));
      }
      if (!spec.ok()) return in_file(spec.status());
      config->groups.push_back(*std::move(spec));
    }
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
    absl::StatusOr<const TransportKind*> transport = TransportOf(g);
    if (transport.ok() && !(*transport)->engines_speak_http()) continue;
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
