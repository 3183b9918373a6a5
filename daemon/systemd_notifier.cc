#include "daemon/systemd_notifier.h"

#include <systemd/sd-daemon.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace wsync {

SystemdNotifier::~SystemdNotifier() { StopWatchdog(); }

void SystemdNotifier::StopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void SystemdNotifier::Ready(const std::string& status) {
  if (sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str()) > 0) {
    WSYNC_LOG(Info, "told systemd: ready");
  }
}

void SystemdNotifier::Stopping() {
  // The daemon stops answering as it exits: that is no reason to be restarted.
  StopWatchdog();
  if (sd_notify(0, "STOPPING=1\nSTATUS=draining, then exiting") > 0) {
    WSYNC_LOG(Info, "told systemd: stopping");
  }
}

void SystemdNotifier::StartWatchdog() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  const absl::Duration period = absl::Microseconds(static_cast<int64_t>(usec));
  WSYNC_LOG(Info, "systemd watchdog every ", absl::FormatDuration(period),
            ": fed while wsyncd answers a health check on ", self_target_);
  watchdog_ = std::thread([this, period] { WatchdogLoop(period); });
}

bool SystemdNotifier::SelfCheck(absl::Duration timeout) const {
  auto stub = grpc::health::v1::Health::NewStub(self_channel_());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

void SystemdNotifier::WatchdogLoop(absl::Duration period) {
  // Fed twice per period, so one slow check does not cost a restart.
  const absl::Duration interval = period / 2;
  bool failing = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    const bool ok = SelfCheck(std::min(interval, absl::Seconds(5)));
    if (ok) {
      sd_notify(0, "WATCHDOG=1");
      if (failing) WSYNC_LOG(Info, "watchdog: wsyncd answers on ", self_target_, " again");
    } else if (!failing) {
      WSYNC_LOG(Error, "watchdog: wsyncd does not answer a health check on ", self_target_,
                "; not feeding systemd's watchdog, which restarts wsyncd if this lasts");
    }
    failing = !ok;
    lock.lock();
    cv_.wait_for(lock, absl::ToChronoNanoseconds(interval), [this] { return stop_; });
  }
}

}  // namespace wsync
