#include "daemon/service/health_reporter.h"

#include "absl/time/clock.h"
#include "common/log.h"

namespace wsync {

HealthReporter::HealthReporter(DaemonCore* core, grpc::HealthCheckServiceInterface* health,
                               std::function<absl::Status()> can_serve, absl::Duration drain_poll,
                               absl::Duration device_poll)
    : core_(core),
      health_(health),
      can_serve_(std::move(can_serve)),
      drain_poll_(drain_poll),
      device_poll_(device_poll) {
  Set(kAdminService, true, "");
  thread_ = std::thread([this] { Loop(); });
}

HealthReporter::~HealthReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HealthReporter::Set(const std::string& service, bool serving, const std::string& why) {
  auto it = serving_.find(service);
  if (it != serving_.end() && it->second == serving) return;
  serving_[service] = serving;
  health_->SetServingStatus(service, serving);
  const std::string name = service.empty() ? std::string("wsyncd") : service;
  if (serving) {
    WSYNC_LOG(Info, "health: ", name, " SERVING");
  } else {
    WSYNC_LOG(Warning, "health: ", name, " NOT_SERVING: ", why);
  }
}

void HealthReporter::Loop() {
  absl::Status devices = core_->platform().CheckDevices();
  absl::Time devices_checked = absl::Now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (absl::Now() - devices_checked >= device_poll_) {
      lock.unlock();
      devices = core_->platform().CheckDevices();
      lock.lock();
      devices_checked = absl::Now();
    }
    const bool draining = core_->draining();
    const absl::Status serving = can_serve_ ? can_serve_() : absl::OkStatus();
    // The first reason that holds, in the order a restart would cure them.
    const std::string why = !devices.ok()   ? std::string(devices.message())
                            : !serving.ok() ? std::string(serving.message())
                                            : "";
    Set(kAdminService, serving.ok(), std::string(serving.message()));
    Set("", devices.ok() && serving.ok(), why);
    Set(kTrainerService, devices.ok() && serving.ok() && !draining,
        why.empty() ? "draining: new sessions and updates are refused" : why);
    cv_.wait_for(lock, absl::ToChronoNanoseconds(drain_poll_), [this] { return stop_; });
  }
}

}  // namespace wsync
