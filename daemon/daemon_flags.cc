#include "daemon/daemon_flags.h"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/log.h"

namespace wsync {
namespace {

// Flags whose value the config file also holds: each with how to take the file's value when
// the flag is not on the command line.
class FlagTable {
 public:
  using FromFile = std::function<void(const DaemonConfig& file)>;
  CLI::Option* Bind(CLI::Option* option, FromFile from_file) {
    rows_.emplace_back(option, std::move(from_file));
    return option;
  }
  void MergeFile(const DaemonConfig& file) const {
    for (const auto& [option, from_file] : rows_) {
      if (option->count() == 0) from_file(file);
    }
  }

 private:
  std::vector<std::pair<CLI::Option*, FromFile>> rows_;
};

// The flags held in units other than the config's (seconds, a size in text) until the merge is
// done, and those that only the command line has.
struct RawFlags {
  std::string config_path;
  std::string slot_bytes = "512MiB";
  double bucket_timeout = 120;
  double lease = 60;
  double control_timeout = 30;
  double stream_idle_timeout = 0;
  double handshake_timeout = 0;
  std::vector<std::string> engine_networks;
  std::string state_dir;
  std::vector<std::string> relay_token_files;  // FILE=GROUP[,GROUP...][@NODE[,NODE...]] each
  std::vector<std::string> relay_feeds;        // KEY=VALUE,... each
  std::string resident;                        // none, host, gpu; "" keeps the config's
  std::string resident_bytes;                  // "" keeps the config's
};

// "--relay-token-file FILE=GROUP[,GROUP...][@NODE[,NODE...]]": a relay token, the groups it
// admits to and, where given, the only nodes that may subscribe with it.
absl::StatusOr<ServerOptions::RelayTokenFile> ParseRelayTokenFlag(const std::string& text) {
  const size_t eq = text.rfind('=');
  std::vector<std::string> groups, nodes;
  const auto list = [](absl::string_view part, std::vector<std::string>* out) {
    for (absl::string_view item : absl::StrSplit(part, ',', absl::SkipWhitespace())) {
      out->emplace_back(absl::StripAsciiWhitespace(item));
    }
  };
  bool nodes_given = false;
  if (eq != std::string::npos) {
    absl::string_view rest = absl::string_view(text).substr(eq + 1);
    if (const size_t at = rest.find('@'); at != absl::string_view::npos) {
      list(rest.substr(at + 1), &nodes);
      nodes_given = true;
      rest = rest.substr(0, at);
    }
    list(rest, &groups);
  }
  if (eq == std::string::npos || eq == 0 || groups.empty() || (nodes_given && nodes.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--relay-token-file ", text,
        ": give FILE=GROUP[,GROUP...][@NODE[,NODE...]], the token's file, the groups a "
        "downstream wsyncd holding it may subscribe to and, after @, the only nodes that may"));
  }
  return ServerOptions::RelayTokenFile{text.substr(0, eq), std::move(groups), std::move(nodes)};
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

void AddServerFlags(CLI::App& app, FlagTable& table, DaemonConfig& c, RawFlags& raw) {
  ServerOptions& s = c.server;
  table.Bind(app.add_option("--socket", s.unix_socket,
                            "unix socket for the gRPC API: 0660 with group --socket-group when "
                            "that group exists, else 0600; '' for none"),
             [&s](const DaemonConfig& f) { s.unix_socket = f.server.unix_socket; });
  table.Bind(app.add_option("--socket-group", s.socket_group,
                            "group whose members may connect to the socket"),
             [&s](const DaemonConfig& f) { s.socket_group = f.server.socket_group; });
  table.Bind(app.add_option("--admin-group", s.admin_group,
                            "group whose members are admins on the socket (root and wsyncd's own "
                            "user always are)"),
             [&s](const DaemonConfig& f) { s.admin_group = f.server.admin_group; });
  table.Bind(
      app.add_option("--listen", s.tcp_listen,
                     "also serve gRPC on this TCP host:port, with TLS and tokens (see --tls-cert)"),
      [&s](const DaemonConfig& f) { s.tcp_listen = f.server.tcp_listen; });
  table.Bind(app.add_option("--tls-cert", s.tls_cert_file, "PEM certificate chain for --listen"),
             [&s](const DaemonConfig& f) { s.tls_cert_file = f.server.tls_cert_file; });
  table.Bind(app.add_option("--tls-key", s.tls_key_file, "PEM private key for --listen"),
             [&s](const DaemonConfig& f) { s.tls_key_file = f.server.tls_key_file; });
  table.Bind(
      app.add_option("--token-file", s.token_file, "file holding the token TCP trainers present"),
      [&s](const DaemonConfig& f) { s.token_file = f.server.token_file; });
  table.Bind(app.add_option("--admin-token-file", s.admin_token_file,
                            "file holding the token TCP admins present"),
             [&s](const DaemonConfig& f) { s.admin_token_file = f.server.admin_token_file; });
  table.Bind(app.add_option("--relay-token-file", raw.relay_token_files,
                            "FILE=GROUP[,GROUP...][@NODE[,NODE...]]: a token downstream wsyncds "
                            "present to subscribe to those groups (the node relay), and nothing "
                            "else; after @, the only nodes that may use it; repeat for more "
                            "tokens")
                 ->allow_extra_args(false),
             [&s](const DaemonConfig& f) { s.relay_token_files = f.server.relay_token_files; });
  table.Bind(app.add_option("--relay-feed", raw.relay_feeds,
                            "upstream=HOST:PORT,group=G,token_file=F,ca_file=C"
                            "[,local_group=L][,node=N][,server_name=S]: subscribe to relay group G "
                            "of the upstream wsyncd and feed local group L (default G) from it; "
                            "repeat for more feeds")
                 ->allow_extra_args(false),
             [&c](const DaemonConfig& f) { c.relay_feeds = f.relay_feeds; });
  table.Bind(app.add_option("--resident", raw.resident,
                            "none|host|gpu: a relay feed keeps the last version it received "
                            "whole there, and brings engines that restart (or a group created "
                            "later) to it with no trainer (default none)"),
             [&c](const DaemonConfig& f) { c.resident = f.resident; });
  table.Bind(app.add_option("--resident-bytes", raw.resident_bytes,
                            "the most memory the resident version may take (default 64GiB); a "
                            "version larger is not kept, saying so"),
             [&c](const DaemonConfig& f) { c.resident.cap_bytes = f.resident.cap_bytes; });
  table.Bind(app.add_flag("--insecure-listen", s.insecure_listen,
                          "serve --listen as plain TCP without tokens, every caller a trainer "
                          "(trusted networks only)"),
             [&s](const DaemonConfig& f) { s.insecure_listen = f.server.insecure_listen; });
  table.Bind(app.add_option("--max-streams-per-connection", s.max_streams_per_connection,
                            "streams (updates, session holds, reflection) one connection may hold "
                            "open at once; each holds a server thread")
                 ->check(CLI::Range(1, 4096)),
             [&s](const DaemonConfig& f) {
               s.max_streams_per_connection = f.server.max_streams_per_connection;
             });
  table.Bind(
      app.add_option("--max-streams-per-caller", s.max_streams_per_caller,
                     "streams one caller (a unix user, a TCP address) may hold open at "
                     "once over all its connections")
          ->check(CLI::Range(1, 4096)),
      [&s](const DaemonConfig& f) { s.max_streams_per_caller = f.server.max_streams_per_caller; });
  raw.stream_idle_timeout = Seconds(s.stream_idle_timeout);
  table.Bind(app.add_option("--stream-idle-timeout", raw.stream_idle_timeout,
                            "seconds an update stream may wait for its begin, and a reflection "
                            "stream for its next request, before it is closed")
                 ->check(CLI::PositiveNumber),
             [&raw](const DaemonConfig& f) {
               raw.stream_idle_timeout = Seconds(f.server.stream_idle_timeout);
             });
  raw.handshake_timeout = Seconds(s.handshake_timeout);
  table.Bind(app.add_option("--handshake-timeout", raw.handshake_timeout,
                            "seconds a TCP connection may take to finish its TLS handshake before "
                            "it is closed")
                 ->check(CLI::PositiveNumber),
             [&raw](const DaemonConfig& f) {
               raw.handshake_timeout = Seconds(f.server.handshake_timeout);
             });
}

void AddSlotFlags(CLI::App& app, FlagTable& table, DaemonConfig& c, RawFlags& raw) {
  DaemonOptions& d = c.daemon;
  table.Bind(app.add_option("--mode", d.mode,
                            "cuda: CUDA IPC slots + NCCL; host: shared memory + TCP collective, "
                            "for development, CI and the demo")
                 ->check(CLI::IsMember({"cuda", "host"})),
             [&d](const DaemonConfig& f) { d.mode = f.daemon.mode; });
  table.Bind(
      app.add_option("--slots", d.slots_per_device, "slots per device (>= 2 pipelines buckets)")
          ->check(CLI::Range(1, 64)),
      [&d](const DaemonConfig& f) { d.slots_per_device = f.daemon.slots_per_device; });
  // The file's size is taken only where it sets one: its default is the flag's.
  table.Bind(app.add_option("--slot-bytes", raw.slot_bytes, "size of each slot, e.g. 512MiB"),
             [&d, &raw](const DaemonConfig& f) {
               if (f.daemon.slot_bytes != d.slot_bytes) {
                 raw.slot_bytes = std::to_string(f.daemon.slot_bytes);
               }
             });
  // Timeouts are above zero, as in the config file: a negative one fails everything at once.
  table.Bind(
      app.add_option("--bucket-timeout", raw.bucket_timeout,
                     "seconds a bucket may take end to end, and a trainer may stay silent "
                     "during its update, before the update fails")
          ->check(CLI::PositiveNumber),
      [&raw](const DaemonConfig& f) { raw.bucket_timeout = Seconds(f.daemon.bucket_timeout); });
  table.Bind(app.add_option("--checksum", d.checksum,
                            "what trainers checksum in each bucket they fill and wsyncd verifies "
                            "before sending: auto (default): crc32 where the bytes then cross a "
                            "wire, crc32-sampled where the engines read them on the same GPU; "
                            "crc32: every byte; crc32-sampled: 4 KiB in every MiB; none: nothing "
                            "(no guard against a trainer-side copy bug)")
                 ->check(CLI::IsMember({"auto", "crc32", "crc32-sampled", "none"})),
             [&d](const DaemonConfig& f) { d.checksum = f.daemon.checksum; });
  table.Bind(app.add_flag("--release-idle-slots", d.release_idle_slots,
                          "free a device's slots when its last session closes, for training to "
                          "use (colocated); the next session there makes them anew"),
             [&d](const DaemonConfig& f) { d.release_idle_slots = f.daemon.release_idle_slots; });
  table.Bind(app.add_option("--lease", raw.lease, "seconds an idle session lives")
                 ->check(CLI::PositiveNumber),
             [&raw](const DaemonConfig& f) { raw.lease = Seconds(f.daemon.lease); });
}

void AddEngineFlags(CLI::App& app, FlagTable& table, DaemonConfig& c, RawFlags& raw) {
  TransportOptions& t = c.daemon.group.transport;
  table.Bind(app.add_option("--control-timeout", raw.control_timeout,
                            "seconds for each engine control call (init, pause, version), the "
                            "whole request; health probes get at most 5 s of it")
                 ->check(CLI::PositiveNumber),
             [&raw](const DaemonConfig& f) {
               raw.control_timeout = Seconds(f.daemon.group.timeouts.control);
             });
  table.Bind(app.add_option("--advertise-address", t.advertise_address,
                            "address engines use to reach this daemon's rendezvous store"),
             [&t](const DaemonConfig& f) {
               t.advertise_address = f.daemon.group.transport.advertise_address;
             });
  table.Bind(
      app.add_option("--bind-address", t.bind_address,
                     "address the rendezvous stores and collectives listen on (default: "
                     "the advertise address)"),
      [&t](const DaemonConfig& f) { t.bind_address = f.daemon.group.transport.bind_address; });
  table.Bind(app.add_option("--ipc-socket-dir", t.socket_dir,
                            "directory for the ZMQ sockets of SGLang's map-once route (ipc_route "
                            "\"ipc\"): one that wsyncd and the engines both see"),
             [&t](const DaemonConfig& f) { t.socket_dir = f.daemon.group.transport.socket_dir; });
  // Groups come from the file only; the engines' networks from the flag when it is given.
  table.Bind(app.add_option("--engine-networks", raw.engine_networks,
                            "comma-separated hosts, addresses and networks (CIDR) engines may be "
                            "at (default: loopback and the config's groups' hosts)")
                 ->delimiter(','),
             [&c](const DaemonConfig& f) { c.engine_networks = f.engine_networks; });
}

void AddOperationFlags(CLI::App& app, FlagTable& table, DaemonConfig& c, RawFlags& raw,
                       std::string& nccl_lib) {
  table.Bind(app.add_option("--log-level", c.log_level, "debug, info, warning, error"),
             [&c](const DaemonConfig& f) { c.log_level = f.log_level; });
  table.Bind(app.add_option("--log-format", c.log_format,
                            "text, or json: one object per line ({ts, level, msg} and, for "
                            "updates, their fields) for log collectors"),
             [&c](const DaemonConfig& f) { c.log_format = f.log_format; });
  table.Bind(app.add_option("--log-repeat-seconds", c.log_repeat_seconds,
                            "the same line again within this many seconds is held back and "
                            "counted (0: never)"),
             [&c](const DaemonConfig& f) { c.log_repeat_seconds = f.log_repeat_seconds; });
  table.Bind(app.add_option("--state-dir", raw.state_dir,
                            "directory where wsyncd records the groups it has open at the "
                            "engines, so that after a crash the next wsyncd drops their stale "
                            "groups and keeps engines left paused mid-update paused until a full "
                            "version; one wsyncd per directory. Default: $STATE_DIRECTORY "
                            "(systemd), else $XDG_STATE_HOME/wsync, else /var/lib/wsync for root, "
                            "else ~/.local/state/wsync; '' for none"),
             [&c](const DaemonConfig& f) { c.state_dir = f.state_dir; });
  table.Bind(app.add_option("--metrics-listen", c.metrics_listen,
                            "serve Prometheus metrics at http://HOST:PORT/metrics (off by default; "
                            "the port is not authenticated, so bind it to an address only the "
                            "scraper reaches)"),
             [&c](const DaemonConfig& f) { c.metrics_listen = f.metrics_listen; });
  app.add_option("--nccl-lib", nccl_lib,
                 "libnccl to load: use the engines' own (torch's site-packages/nvidia/nccl/lib), "
                 "since NCCL refuses peers of another version");
}

// Applies the log settings, converts what the flags held in other units, and fills in what
// follows from the rest.
absl::Status CompleteConfig(const RawFlags& raw, DaemonConfig& c) {
  auto level = ParseLogLevel(c.log_level);
  if (!level.ok()) return level.status();
  SetLogLevel(*level);
  auto format = ParseLogFormat(c.log_format);
  if (!format.ok()) return format.status();
  SetLogFormat(*format);
  if (c.log_repeat_seconds < 0) {
    return absl::InvalidArgumentError("--log-repeat-seconds must not be negative");
  }
  SetLogRepeatWindow(absl::Seconds(c.log_repeat_seconds));
  auto bytes = ParseByteSize(raw.slot_bytes);
  if (!bytes.ok()) return bytes.status();
  c.daemon.slot_bytes = *bytes;
  c.daemon.bucket_timeout = absl::Seconds(raw.bucket_timeout);
  c.daemon.lease = absl::Seconds(raw.lease);
  c.daemon.group.timeouts.control = absl::Seconds(raw.control_timeout);
  // A probe is a control call that waits for nothing at the engine.
  c.daemon.group.timeouts.probe =
      std::min(c.daemon.group.timeouts.probe, c.daemon.group.timeouts.control);
  c.server.stream_idle_timeout = absl::Seconds(raw.stream_idle_timeout);
  c.server.handshake_timeout = absl::Seconds(raw.handshake_timeout);
  TransportOptions& t = c.daemon.group.transport;
  if (t.bind_address.empty()) t.bind_address = t.advertise_address;
  // The engines resolve the stream sockets' addresses in their own working directory, so the
  // directory is made absolute here, and checked now rather than at the first update.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(t.socket_dir, ec);
  if (ec || !std::filesystem::is_directory(absolute, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ipc-socket-dir ", t.socket_dir,
                     " is not a directory (the map-once route's sockets live there)"));
  }
  t.socket_dir = absolute.lexically_normal().string();
  if (!raw.relay_token_files.empty()) {
    c.server.relay_token_files.clear();
    for (const std::string& text : raw.relay_token_files) {
      auto parsed = ParseRelayTokenFlag(text);
      if (!parsed.ok()) return parsed.status();
      c.server.relay_token_files.push_back(*std::move(parsed));
    }
  }
  if (!raw.resident.empty()) {
    auto medium = ParseResidentMedium(raw.resident);
    if (!medium.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--resident: ", medium.status().message()));
    }
    c.resident.medium = *medium;
  }
  if (!raw.resident_bytes.empty()) {
    auto bytes = ParseByteSize(raw.resident_bytes);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resident-bytes: ", bytes.status().message()));
    }
    c.resident.cap_bytes = *bytes;
  }
  if (c.resident.medium.has_value() && c.relay_feeds.empty() && raw.relay_feeds.empty()) {
    return absl::InvalidArgumentError(
        "--resident keeps what a relay feed receives: give --relay-feed (or relay_feeds) too");
  }
  if (!raw.relay_feeds.empty()) {
    c.relay_feeds.clear();
    for (const std::string& text : raw.relay_feeds) {
      auto parsed = ParseRelayFeedFlag(text);
      if (!parsed.ok()) return parsed.status();
      c.relay_feeds.push_back(*std::move(parsed));
    }
  }
  if (c.server.unix_socket.empty() && c.server.tcp_listen.empty()) {
    return absl::InvalidArgumentError("nothing to serve on: give --socket and/or --listen");
  }
  auto networks = EngineNetworksFor(c);
  if (!networks.ok()) return networks.status();
  c.daemon.engine_networks = *networks;
  return absl::OkStatus();
}

}  // namespace

int ParseDaemonCommandLine(int argc, const char* const* argv, DaemonCommandLine* out) {
  DaemonConfig& config = out->config;
  config.server.unix_socket = "/run/wsync/wsyncd.sock";
  config.daemon.mode = "cuda";
  CLI::App app{
      "wsyncd: moves trainer weights into inference engines (SGLang, vLLM, LMDeploy); "
      "exit status: 0 stopped cleanly, 1 failed, 2 usage"};
  app.set_version_flag("--version", "wsyncd " WSYNC_VERSION);
  FlagTable table;
  RawFlags raw;
  app.add_option("--config", raw.config_path, "JSON config file (may predeclare groups)");
  AddServerFlags(app, table, config, raw);
  AddSlotFlags(app, table, config, raw);
  AddEngineFlags(app, table, config, raw);
  AddOperationFlags(app, table, config, raw, out->nccl_lib);
  if (const int exit_code = ParseCommandLine(app, argc, argv); exit_code >= 0) return exit_code;
  CLI::Option* networks = app.get_option("--engine-networks");
  CLI::Option* state_dir = app.get_option("--state-dir");
  if (!raw.config_path.empty()) {
    DaemonConfig file = config;
    if (absl::Status s = LoadConfigFile(raw.config_path, &file); !s.ok()) {
      std::fprintf(stderr, "wsyncd: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    table.MergeFile(file);
    config.groups = file.groups;
  }
  if (networks->count() > 0) config.engine_networks = raw.engine_networks;
  if (state_dir->count() > 0) config.state_dir = raw.state_dir;
  if (absl::Status s = CompleteConfig(raw, config); !s.ok()) {
    std::fprintf(stderr, "wsyncd: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return -1;
}

}  // namespace wsync
