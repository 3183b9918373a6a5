#include "daemon/metrics/metrics_server.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace wsync {

DaemonMetrics::DaemonMetrics()
    : registry_(std::make_shared<prometheus::Registry>()), updates_(*registry_) {}

DaemonMetrics::~DaemonMetrics() { Stop(); }

std::vector<std::string> DaemonMetrics::ExposerOptions(const std::string& listen) {
  return {
      "listening_ports",
      listen,
      // civetweb gives each connection a thread of its own until its request is answered, so
      // a client that connects and sends nothing holds one: these are how many such clients a
      // scrape gets past.
      "num_threads",
      std::to_string(kThreads),
      // Civetweb's default is 30 s for a request to arrive (whole, however slowly it comes) and
      // for each write of the answer; a scraper sends its request at once.
      "request_timeout_ms",
      std::to_string(absl::ToInt64Milliseconds(kRequestTimeout)),
      // Served connections close: a client that keeps one open holds no thread between scrapes.
      "enable_keep_alive",
      "no",
  };
}

absl::Status DaemonMetrics::Serve(const std::string& listen, DaemonCore* core) {
  state_ = std::make_shared<StateCollector>(core);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(ExposerOptions(listen));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-listen ", listen, ": cannot serve there: ", e.what()));
  }
  state_->Start();
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(state_);
  return absl::OkStatus();
}

void DaemonMetrics::Stop() {
  // No scrape is served after this, so none reads the collector while it stops.
  exposer_.reset();
  if (state_) state_->Stop();
}

int DaemonMetrics::port() const {
  if (!exposer_) return 0;
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void DaemonMetrics::SetResidents(StateCollector::ResidentSource source) {
  if (state_ != nullptr) state_->SetResidents(std::move(source));
}

}  // namespace wsync
