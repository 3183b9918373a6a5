#ifndef WSYNC_DAEMON_METRICS_METRICS_SERVER_H_
#define WSYNC_DAEMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/daemon_core.h"
#include "daemon/metrics/state_collector.h"
#include "daemon/metrics/update_metrics.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace wsync {

// wsyncd's Prometheus endpoint: GET /metrics on `--metrics-listen` in the text exposition
// format, served by prometheus-cpp's exposer. It holds the update metrics (which the core must be
// given as its observer before it starts) and reads the core's state at each scrape, and engine
// health from a probe in the background (StateCollector). Slow or idle clients hold a serving
// thread each for at most kRequestTimeout, and up to kThreads - 1 of them leave a scrape served.
class DaemonMetrics {
 public:
  static constexpr int kThreads = 8;
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(5);

  DaemonMetrics();
  ~DaemonMetrics();
  // Listens on "HOST:PORT" (port 0: any) and serves the core's state along with the update
  // metrics. UNAVAILABLE when the address cannot be bound.
  absl::Status Serve(const std::string& listen, DaemonCore* core);
  // The observer to put in DaemonOptions before the core is made.
  UpdateObserver* observer() { return &updates_; }
  // The port served (after Serve), 0 before.
  int port() const;
  // Where the relay feeds' resident versions are read at each scrape (after Serve); `source` must
  // stay valid until Stop.
  void SetResidents(StateCollector::ResidentSource source);
  // Stops serving and probing; the core may go after this.
  void Stop();
  // The exposer's (civetweb's) options for serving on `listen`.
  static std::vector<std::string> ExposerOptions(const std::string& listen);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  UpdateMetrics updates_;
  std::shared_ptr<StateCollector> state_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_METRICS_METRICS_SERVER_H_
