// wsyncd: the per-node weight-sync daemon.

#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host/fault_guard.h"
#include "common/host/host_platform.h"
#include "common/host/shm_sweep.h"
#ifdef WSYNC_HAVE_CUDA
#include "common/cuda/cuda_platform.h"
#endif
#include "common/gpu_sharing.h"
#include "common/log.h"
#include "daemon/config.h"
#include "daemon/core/daemon_core.h"
#include "daemon/group_factories.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/service/server.h"
#include "daemon/state_dir.h"
#include "daemon/systemd_notifier.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "wsyncd: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Take the whole descriptor allowance: a daemon that runs out stops accepting on its gRPC
  // listener, and the rendezvous stores budget a quarter of whatever the limit is.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  wsync::DaemonConfig config;
  config.server.unix_socket = "/run/wsync/wsyncd.sock";
  config.daemon.mode = "cuda";

  CLI::App app{"wsyncd: moves trainer weights into inference engines (SGLang, vLLM, LMDeploy)"};
  std::string config_path, slot_bytes = "512MiB", log_level = "info";
  double bucket_timeout = 120, lease = 60, control_timeout = 30;
  app.add_option("--config", config_path, "JSON config file (may predeclare groups)");
  auto* socket_opt = app.add_option(
      "--socket", config.server.unix_socket,
      "unix socket for the gRPC API: 0660 with group --socket-group when that group exists, "
      "else 0600; '' for none");
  auto* socket_group_opt = app.add_option("--socket-group", config.server.socket_group,
                                          "group whose members may connect to the socket");
  auto* admin_group_opt =
      app.add_option("--admin-group", config.server.admin_group,
                     "group whose members are admins on the socket (root and wsyncd's own "
                     "user always are)");
  auto* listen_opt =
      app.add_option("--listen", config.server.tcp_listen,
                     "also serve gRPC on this TCP host:port, with TLS and tokens (see --tls-cert)");
  auto* cert_opt = app.add_option("--tls-cert", config.server.tls_cert_file,
                                  "PEM certificate chain for --listen");
  auto* key_opt =
      app.add_option("--tls-key", config.server.tls_key_file, "PEM private key for --listen");
  auto* token_opt = app.add_option("--token-file", config.server.token_file,
                                   "file holding the token TCP trainers present");
  auto* admin_token_opt = app.add_option("--admin-token-file", config.server.admin_token_file,
                                         "file holding the token TCP admins present");
  auto* insecure_opt = app.add_flag(
      "--insecure-listen", config.server.insecure_listen,
      "serve --listen as plain TCP without tokens, every caller a trainer (trusted networks only)");
  auto* per_connection_opt =
      app.add_option("--max-streams-per-connection", config.server.max_streams_per_connection,
                     "streams (updates, session holds, reflection) one connection may hold open "
                     "at once; each holds a server thread")
          ->check(CLI::Range(1, 4096));
  auto* per_caller_opt =
      app.add_option("--max-streams-per-caller", config.server.max_streams_per_caller,
                     "streams one caller (a unix user, a TCP address) may hold open at once over "
                     "all its connections")
          ->check(CLI::Range(1, 4096));
  double stream_idle_timeout = absl::ToDoubleSeconds(config.server.stream_idle_timeout);
  auto* stream_idle_opt =
      app.add_option("--stream-idle-timeout", stream_idle_timeout,
                     "seconds an update stream may wait for its begin, and a reflection stream "
                     "for its next request, before it is closed")
          ->check(CLI::PositiveNumber);
  double handshake_timeout = absl::ToDoubleSeconds(config.server.handshake_timeout);
  auto* handshake_opt =
      app.add_option("--handshake-timeout", handshake_timeout,
                     "seconds a TCP connection may take to finish its TLS handshake before it is "
                     "closed")
          ->check(CLI::PositiveNumber);
  auto* mode_opt = app.add_option("--mode", config.daemon.mode,
                                  "cuda: CUDA IPC slots + NCCL; host: shared memory + TCP "
                                  "collective, for development, CI and the demo")
                       ->check(CLI::IsMember({"cuda", "host"}));
  auto* slots_opt = app.add_option("--slots", config.daemon.slots_per_device,
                                   "slots per device (>= 2 pipelines buckets)")
                        ->check(CLI::Range(1, 64));
  auto* bytes_opt = app.add_option("--slot-bytes", slot_bytes, "size of each slot, e.g. 512MiB");
  // Timeouts are above zero, as in the config file: a negative one fails everything at once.
  auto* bt_opt = app.add_option("--bucket-timeout", bucket_timeout,
                                "seconds a bucket may take end to end, and a trainer may stay "
                                "silent during its update, before the update fails")
                     ->check(CLI::PositiveNumber);
  auto* checksum_opt =
      app.add_option("--checksum", config.daemon.checksum,
                     "crc32: trainers checksum each bucket and wsyncd verifies it before sending; "
                     "none: skip both (faster; no guard against a trainer-side copy bug)")
          ->check(CLI::IsMember({"crc32", "none"}));
  auto* release_opt = app.add_flag(
      "--release-idle-slots", config.daemon.release_idle_slots,
      "free a device's slots when its last session closes, for training to use (colocated); "
      "the next session there makes them anew");
  auto* lease_opt =
      app.add_option("--lease", lease, "seconds an idle session lives")->check(CLI::PositiveNumber);
  auto* ct_opt = app.add_option("--control-timeout", control_timeout,
                                "seconds for each engine control call (init, pause, version), "
                                "the whole request; health probes get at most 5 s of it")
                     ->check(CLI::PositiveNumber);
  auto* adv_opt =
      app.add_option("--advertise-address", config.daemon.group.transport.advertise_address,
                     "address engines use to reach this daemon's rendezvous store");
  auto* bind_opt =
      app.add_option("--bind-address", config.daemon.group.transport.bind_address,
                     "address the rendezvous stores and collectives listen on (default: the "
                     "advertise address)");
  auto* socket_dir_opt = app.add_option(
      "--ipc-socket-dir", config.daemon.group.transport.ipc_socket_dir,
      "directory for the ZMQ sockets of SGLang's map-once route (ipc_route \"ipc\"): one that "
      "wsyncd and the engines both see");
  auto* log_opt = app.add_option("--log-level", log_level, "debug, info, warning, error");
  auto* log_format_opt = app.add_option(
      "--log-format", config.log_format,
      "text, or json: one object per line ({ts, level, msg} and, for updates, their fields) for "
      "log collectors");
  auto* repeat_opt = app.add_option(
      "--log-repeat-seconds", config.log_repeat_seconds,
      "the same line again within this many seconds is held back and counted (0: never)");
  std::vector<std::string> engine_networks;
  auto* networks_opt =
      app.add_option("--engine-networks", engine_networks,
                     "comma-separated hosts, addresses and networks (CIDR) engines may be at "
                     "(default: loopback and the config's groups' hosts)")
          ->delimiter(',');
  std::string state_dir;
  auto* state_opt = app.add_option(
      "--state-dir", state_dir,
      "directory where wsyncd records the groups it has open at the engines, so that after a "
      "crash the next wsyncd drops their stale groups and keeps engines left paused mid-update "
      "paused until a full version; one wsyncd per directory. Default: $STATE_DIRECTORY "
      "(systemd), else $XDG_STATE_HOME/wsync, else /var/lib/wsync for root, else "
      "~/.local/state/wsync; '' for none");
  auto* metrics_opt = app.add_option(
      "--metrics-listen", config.metrics_listen,
      "serve Prometheus metrics at http://HOST:PORT/metrics (off by default; the port is not "
      "authenticated, so bind it to an address only the scraper reaches)");
  std::string nccl_lib = "libnccl.so.2";
  app.add_option("--nccl-lib", nccl_lib,
                 "libnccl to load: use the engines' own (torch's site-packages/nvidia/nccl/lib), "
                 "since NCCL refuses peers of another version");
  CLI11_PARSE(app, argc, argv);
  if (state_opt->count() > 0) config.state_dir = state_dir;

  if (!config_path.empty()) {
    wsync::DaemonConfig from_file = config;
    if (auto s = wsync::LoadConfigFile(config_path, &from_file); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    // Flags given on the command line win over the file.
    if (socket_opt->count() == 0) config.server.unix_socket = from_file.server.unix_socket;
    if (listen_opt->count() == 0) config.server.tcp_listen = from_file.server.tcp_listen;
    if (socket_group_opt->count() == 0) config.server.socket_group = from_file.server.socket_group;
    if (admin_group_opt->count() == 0) config.server.admin_group = from_file.server.admin_group;
    if (cert_opt->count() == 0) config.server.tls_cert_file = from_file.server.tls_cert_file;
    if (key_opt->count() == 0) config.server.tls_key_file = from_file.server.tls_key_file;
    if (token_opt->count() == 0) config.server.token_file = from_file.server.token_file;
    if (admin_token_opt->count() == 0) {
      config.server.admin_token_file = from_file.server.admin_token_file;
    }
    if (insecure_opt->count() == 0)
      config.server.insecure_listen = from_file.server.insecure_listen;
    if (per_connection_opt->count() == 0) {
      config.server.max_streams_per_connection = from_file.server.max_streams_per_connection;
    }
    if (per_caller_opt->count() == 0) {
      config.server.max_streams_per_caller = from_file.server.max_streams_per_caller;
    }
    if (stream_idle_opt->count() == 0) {
      stream_idle_timeout = absl::ToDoubleSeconds(from_file.server.stream_idle_timeout);
    }
    if (handshake_opt->count() == 0) {
      handshake_timeout = absl::ToDoubleSeconds(from_file.server.handshake_timeout);
    }
    if (mode_opt->count() == 0) config.daemon.mode = from_file.daemon.mode;
    if (slots_opt->count() == 0) config.daemon.slots_per_device = from_file.daemon.slots_per_device;
    if (bytes_opt->count() == 0 && from_file.daemon.slot_bytes != config.daemon.slot_bytes) {
      slot_bytes = std::to_string(from_file.daemon.slot_bytes);
    }
    if (bt_opt->count() == 0) {
      bucket_timeout = absl::ToDoubleSeconds(from_file.daemon.bucket_timeout);
    }
    if (checksum_opt->count() == 0) config.daemon.checksum = from_file.daemon.checksum;
    if (release_opt->count() == 0) {
      config.daemon.release_idle_slots = from_file.daemon.release_idle_slots;
    }
    if (lease_opt->count() == 0) lease = absl::ToDoubleSeconds(from_file.daemon.lease);
    if (ct_opt->count() == 0) {
      control_timeout = absl::ToDoubleSeconds(from_file.daemon.group.timeouts.control);
    }
    if (adv_opt->count() == 0) {
      config.daemon.group.transport.advertise_address =
          from_file.daemon.group.transport.advertise_address;
    }
    if (bind_opt->count() == 0)
      config.daemon.group.transport.bind_address = from_file.daemon.group.transport.bind_address;
    if (socket_dir_opt->count() == 0) {
      config.daemon.group.transport.ipc_socket_dir =
          from_file.daemon.group.transport.ipc_socket_dir;
    }
    if (log_opt->count() == 0) log_level = from_file.log_level;
    if (log_format_opt->count() == 0) config.log_format = from_file.log_format;
    if (repeat_opt->count() == 0) config.log_repeat_seconds = from_file.log_repeat_seconds;
    config.groups = from_file.groups;
    config.engine_networks = from_file.engine_networks;
    if (state_opt->count() == 0) config.state_dir = from_file.state_dir;
    if (metrics_opt->count() == 0) config.metrics_listen = from_file.metrics_listen;
  }
  if (networks_opt->count() > 0) config.engine_networks = engine_networks;
  auto level = wsync::ParseLogLevel(log_level);
  if (!level.ok()) return Fail(std::string(level.status().message()));
  wsync::SetLogLevel(*level);
  auto log_format = wsync::ParseLogFormat(config.log_format);
  if (!log_format.ok()) return Fail(std::string(log_format.status().message()));
  wsync::SetLogFormat(*log_format);
  if (config.log_repeat_seconds < 0) return Fail("--log-repeat-seconds must not be negative");
  wsync::SetLogRepeatWindow(absl::Seconds(config.log_repeat_seconds));
  auto bytes = wsync::ParseByteSize(slot_bytes);
  if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
  config.daemon.slot_bytes = *bytes;
  config.daemon.bucket_timeout = absl::Seconds(bucket_timeout);
  config.daemon.lease = absl::Seconds(lease);
  config.daemon.group.timeouts.control = absl::Seconds(control_timeout);
  // A probe is a control call that waits for nothing at the engine.
  config.daemon.group.timeouts.probe =
      std::min(config.daemon.group.timeouts.probe, config.daemon.group.timeouts.control);
  config.server.stream_idle_timeout = absl::Seconds(stream_idle_timeout);
  config.server.handshake_timeout = absl::Seconds(handshake_timeout);
  if (config.daemon.group.transport.bind_address.empty()) {
    config.daemon.group.transport.bind_address = config.daemon.group.transport.advertise_address;
  }
  {
    // The engines resolve the stream sockets' addresses in their own working directory, so the
    // directory is made absolute here, and checked now rather than at the first update.
    std::string& dir = config.daemon.group.transport.ipc_socket_dir;
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(dir, ec);
    if (ec || !std::filesystem::is_directory(absolute, ec)) {
      return Fail(absl::StrCat("--ipc-socket-dir ", dir,
                               " is not a directory (the map-once route's sockets live there)"));
    }
    dir = absolute.lexically_normal().string();
    // Directories of wsyncds that died are removed at start, not only at a group's first
    // map-once update.
    for (const std::string& removed : wsync::RemoveDeadStreamSocketDirs(dir)) {
      WSYNC_LOG(Info, "removed the stream socket directory ", removed, " a dead wsyncd left");
    }
  }
  if (config.server.unix_socket.empty() && config.server.tcp_listen.empty()) {
    return Fail("nothing to serve on: give --socket and/or --listen");
  }
  auto networks = wsync::EngineNetworksFor(config);
  if (!networks.ok()) return Fail(std::string(networks.status().message()));
  config.daemon.engine_networks = *networks;
  WSYNC_LOG(Info, "engines may be at: ", config.daemon.engine_networks.Describe(),
            config.engine_networks.has_value() ? "" : " (the default; set engine_networks)");

  std::unique_ptr<wsync::Platform> platform;
  if (config.daemon.mode == "host") {
    WSYNC_LOG(Warning,
              "host mode: shared-memory slots and a TCP collective stand in for CUDA "
              "IPC and NCCL; for development, CI and the demo only");
    // Trainers can truncate the shared memory wsyncd maps; its reads of it are guarded, and the
    // guard's SIGBUS handler goes in before any thread starts.
    wsync::InstallFaultGuard();
    // Shared memory left by host-mode processes that died (this daemon's predecessor killed, a
    // trainer crashed) holds its full size until removed; live processes' segments are kept.
    auto swept = wsync::SweepDeadShm("/dev/shm");
    if (!swept.ok()) {
      WSYNC_LOG(Warning, "could not sweep /dev/shm for leftovers: ", swept.status().message());
    } else {
      for (const wsync::SweptShm& s : *swept) {
        WSYNC_LOG(Info, "removed /dev/shm/", s.entry, " (", s.bytes, " bytes), left by pid ", s.pid,
                  ", which is gone");
      }
    }
    platform =
        std::make_unique<wsync::HostPlatform>(config.daemon.group.transport.bind_address,
                                              config.daemon.group.transport.advertise_address);
  } else {
    // Never fall back to host mode on its own: engines would wait for an NCCL peer that is not
    // there.
#ifdef WSYNC_HAVE_CUDA
    std::string description;
    auto cuda = wsync::cuda::CreateCudaPlatform({nccl_lib}, &description);
    if (!cuda.ok()) return Fail(std::string(cuda.status().message()));
    WSYNC_LOG(Info, "cuda mode: ", description);
    const wsync::GpuSharing sharing = wsync::DetectGpuSharing();
    if (sharing.mps) {
      WSYNC_LOG(Info, sharing.Describe());
    } else {
      WSYNC_LOG(Warning, sharing.Describe());
    }
    config.daemon.gpu_sharing = sharing.Summary();
    platform = std::move(*cuda);
#else
    return Fail(
        "this wsyncd was built without CUDA; rebuild where the CUDA toolkit is installed, or run "
        "with --mode=host for development and CI");
#endif
  }

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto state = wsync::OpenStateDir(config.state_dir);
  if (!state.ok()) return Fail(std::string(state.status().message()));

  // Fresh at every start: engines know each group as "<name>.<incarnation>", so a group an
  // earlier wsyncd left at an engine never stands in the way of this one's, by name.
  config.daemon.group.incarnation = absl::StrFormat("%08x", std::random_device{}());
  WSYNC_LOG(Info, "incarnation ", config.daemon.group.incarnation);
  // Made before the core, which reports each update to it, and stopped before the core goes.
  wsync::DaemonMetrics metrics;
  if (!config.metrics_listen.empty()) config.daemon.observer = metrics.observer();
  wsync::DaemonCore core(std::move(platform), config.daemon, wsync::DefaultGroupFactories(),
                         std::move(state->dir));
  absl::Cleanup stop_metrics = [&metrics] { metrics.Stop(); };
  if (!config.metrics_listen.empty()) {
    if (auto s = metrics.Serve(config.metrics_listen, &core); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    WSYNC_LOG(Info, "metrics at http://", config.metrics_listen, "/metrics (port ", metrics.port(),
              ")");
  }
  auto server = wsync::DaemonServer::Start(&core, config.server);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  if (auto s = core.Recover(config.groups, state->records); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  WSYNC_LOG(Info, "wsyncd ", WSYNC_VERSION, " serving on ", (*server)->listen_description(),
            " (mode ", config.daemon.mode, ", ", config.daemon.slots_per_device, " slots x ",
            config.daemon.slot_bytes, " bytes per device)");
  // The watchdog checks the socket trainers use; a daemon serving only TLS over TCP is checked
  // through an in-process channel (its health, not its listener).
  const std::string socket_target =
      config.server.unix_socket.empty() ? "" : absl::StrCat("unix:", config.server.unix_socket);
  wsync::DaemonServer* raw_server = server->get();
  wsync::SystemdNotifier systemd(
      socket_target.empty() ? "an in-process channel" : socket_target,
      [socket_target, raw_server]() {
        return socket_target.empty()
                   ? raw_server->InProcessChannel()
                   : grpc::CreateChannel(socket_target, grpc::InsecureChannelCredentials());
      });
  systemd.Ready(absl::StrCat("serving on ", (*server)->listen_description()));
  systemd.StartWatchdog();

  int sig = 0;
  sigwait(&stop_signals, &sig);
  systemd.Stopping();
  // Before the drain: an Undrain from here on would take updates that the exit cuts.
  (*server)->BeginStopping(absl::StrCat("it got signal ", sig));
  WSYNC_LOG(Info, "signal ", sig, ": draining (running updates get 30 s to finish)");
  wsync::DrainResult drained = core.Drain(absl::Seconds(30));
  if (!drained.drained) WSYNC_LOG(Warning, "updates still running after the drain deadline");
  (*server)->Shutdown(absl::Seconds(2));
  WSYNC_LOG(Info, "wsyncd stopped");
  return 0;
}
