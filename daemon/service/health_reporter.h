#ifndef WSYNC_DAEMON_SERVICE_HEALTH_REPORTER_H_
#define WSYNC_DAEMON_SERVICE_HEALTH_REPORTER_H_

#include <grpcpp/health_check_service_interface.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/daemon_core.h"

namespace wsync {

// Keeps the standard health service (grpc.health.v1.Health) in step with the daemon, per service:
//   ""                  SERVING while every GPU answers and wsyncd can take calls (liveness: a
//                       broken GPU, or a server that cannot serve, needs a restart)
//   "wsync.v1.Trainer"  SERVING while that holds and wsyncd is not draining (readiness: new
//                       sessions and updates are taken)
//   "wsync.v1.Admin"    SERVING while wsyncd can take calls
// `can_serve` says whether wsyncd can take calls (an error saying why not, such as its server
// threads nearly all busy); it and draining are polled every `drain_poll`, the GPUs
// (Platform::CheckDevices) every `device_poll`; each change is logged.
class HealthReporter {
 public:
  static constexpr char kTrainerService[] = "wsync.v1.Trainer";
  static constexpr char kAdminService[] = "wsync.v1.Admin";

  HealthReporter(DaemonCore* core, grpc::HealthCheckServiceInterface* health,
                 std::function<absl::Status()> can_serve = nullptr,
                 absl::Duration drain_poll = absl::Milliseconds(200),
                 absl::Duration device_poll = absl::Seconds(5));
  // Stops the polls; the statuses stay as they were last set.
  ~HealthReporter();

 private:
  void Loop();
  void Set(const std::string& service, bool serving, const std::string& why);

  DaemonCore* const core_;
  grpc::HealthCheckServiceInterface* const health_;
  const std::function<absl::Status()> can_serve_;
  const absl::Duration drain_poll_;
  const absl::Duration device_poll_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, bool> serving_;  // as last set
  std::thread thread_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_HEALTH_REPORTER_H_
