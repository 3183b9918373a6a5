// wsyncd: the per-node weight-sync daemon.

#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <random>
#include <thread>

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
#include "daemon/daemon_flags.h"
#include "daemon/engines/builtin_engine_kinds.h"
#include "daemon/group_factories.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/service/server.h"
#include "daemon/state_dir.h"
#include "daemon/systemd_notifier.h"
#include "daemon/transport/builtin_transport_kinds.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "wsyncd: %s\n", message.c_str());
  return 1;
}

// Takes the whole descriptor allowance: a daemon that runs out stops accepting on its gRPC
// listener, and the rendezvous stores budget a quarter of whatever the limit is.
void RaiseDescriptorLimit() {
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Host mode's platform, and what it cleans up first.
std::unique_ptr<wsync::Platform> MakeHostPlatform(const wsync::TransportOptions& transport) {
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
  return std::make_unique<wsync::HostPlatform>(transport.bind_address, transport.advertise_address);
}

// The platform of the configured mode. Never falls back to host mode on its own: engines would
// wait for an NCCL peer that is not there.
absl::StatusOr<std::unique_ptr<wsync::Platform>> MakePlatform(wsync::DaemonConfig& config,
                                                              const std::string& nccl_lib) {
  if (config.daemon.mode == "host") return MakeHostPlatform(config.daemon.group.transport);
#ifdef WSYNC_HAVE_CUDA
  std::string description;
  auto cuda = wsync::cuda::CreateCudaPlatform({nccl_lib}, &description);
  if (!cuda.ok()) return cuda.status();
  WSYNC_LOG(Info, "cuda mode: ", description);
  const wsync::GpuSharing sharing = wsync::DetectGpuSharing();
  if (sharing.mps) {
    WSYNC_LOG(Info, sharing.Describe());
  } else {
    WSYNC_LOG(Warning, sharing.Describe());
  }
  config.daemon.gpu_sharing = sharing.Summary();
  return std::unique_ptr<wsync::Platform>(std::move(*cuda));
#else
  (void)nccl_lib;
  return absl::FailedPreconditionError(
      "this wsyncd was built without CUDA; rebuild where the CUDA toolkit is installed, or run "
      "with --mode=host for development and CI");
#endif
}

// Serves until SIGINT or SIGTERM, then drains: the daemon's life once configured.
int Serve(wsync::DaemonConfig& config, std::unique_ptr<wsync::Platform> platform) {
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
  // Each relay feed subscribes once the groups it feeds exist.
  (*server)->StartRelayFeeds(config.relay_feeds, config.resident);
  // The metrics stop reading the feeds before the server (which holds them) goes.
  wsync::DaemonServer* feeds_server = server->get();
  absl::Cleanup forget_residents = [&metrics] { metrics.SetResidents(nullptr); };
  metrics.SetResidents([feeds_server] {
    std::vector<wsync::StateCollector::ResidentRow> rows;
    for (const auto& [feed, view] : feeds_server->RelayResidents()) {
      rows.push_back({feed.local_group, std::string(wsync::ResidentMediumName(view.medium)),
                      view.bytes, view.cap_bytes, !view.version.empty()});
    }
    return rows;
  });
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
  (*server)->StopRelayFeeds();
  if (!drained.drained) WSYNC_LOG(Warning, "updates still running after the drain deadline");
  (*server)->Shutdown(absl::Seconds(2));
  WSYNC_LOG(Info, "wsyncd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  RaiseDescriptorLimit();
  wsync::RegisterBuiltinEngineKinds();
  wsync::RegisterBuiltinTransportKinds();
  wsync::DaemonCommandLine line;
  if (const int exit_code = wsync::ParseDaemonCommandLine(argc, argv, &line); exit_code >= 0) {
    return exit_code;
  }
  wsync::DaemonConfig& config = line.config;
  // Directories of wsyncds that died are removed at start, not only at a group's first map-once
  // update.
  for (const std::string& removed :
       wsync::RemoveDeadStreamSocketDirs(config.daemon.group.transport.socket_dir)) {
    WSYNC_LOG(Info, "removed the stream socket directory ", removed, " a dead wsyncd left");
  }
  WSYNC_LOG(Info, "engines may be at: ", config.daemon.engine_networks.Describe(),
            config.engine_networks.has_value() ? "" : " (the default; set engine_networks)");
  auto platform = MakePlatform(config, line.nccl_lib);
  if (!platform.ok()) return Fail(std::string(platform.status().message()));
  return Serve(config, std::move(*platform));
}
