#ifndef WSYNC_DAEMON_SYSTEMD_NOTIFIER_H_
#define WSYNC_DAEMON_SYSTEMD_NOTIFIER_H_

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace wsync {

// Tells systemd (a Type=notify unit) how wsyncd stands, through libsystemd's sd_notify: READY=1
// once the gRPC socket accepts, STOPPING=1 when the daemon begins to exit, and, where the unit
// sets WatchdogSec, WATCHDOG=1 every half period, but only while a health check over the daemon's
// own socket succeeds: a wsyncd alive but no longer accepting is restarted. Without
// $NOTIFY_SOCKET (not started by systemd) every call does nothing.
class SystemdNotifier {
 public:
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>()>;
  // The watchdog checks the daemon over a fresh channel from `self_channel`, described as `self`
  // in the log ("unix:/run/wsync/wsyncd.sock").
  SystemdNotifier(std::string self, ChannelFactory self_channel)
      : self_target_(std::move(self)), self_channel_(std::move(self_channel)) {}
  ~SystemdNotifier();

  void Ready(const std::string& status);
  void Stopping();
  // Starts the watchdog's feeding where systemd asked for one; logs its period.
  void StartWatchdog();

 private:
  void StopWatchdog();
  void WatchdogLoop(absl::Duration period);
  // One health check of "" over `self_target_`, within `timeout`.
  bool SelfCheck(absl::Duration timeout) const;

  const std::string self_target_;
  const ChannelFactory self_channel_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SYSTEMD_NOTIFIER_H_
