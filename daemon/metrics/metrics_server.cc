#include "daemon/metrics/metrics_server.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace wsync {

DaemonMetrics::DaemonMetrics()
    : registry_(std::make_shared<prometheus::Registry>()), updates_(*registry_) {}

absl::Status DaemonMetrics::Serve(const std::string& listen, DaemonCore* core) {
  state_ = std::make_shared<StateCollector>(core);
  try {
    // One thread: scrapes are rare, and each reads the core once.
    exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-listen ", listen, ": cannot serve there: ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(state_);
  return absl::OkStatus();
}

int DaemonMetrics::port() const {
  if (!exposer_) return 0;
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace wsync
