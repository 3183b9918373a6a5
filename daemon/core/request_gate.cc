#include "daemon/core/request_gate.h"

namespace wsync {

std::vector<RequestGate::Decided> RequestGate::Decide(absl::Status outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  if (decided_) return {};
  decided_ = true;
  outcome_ = std::move(outcome);
  return std::move(waiting_);
}

void RequestGate::Open() {
  for (auto& then : Decide(absl::OkStatus())) then(absl::OkStatus());
}

void RequestGate::Close(absl::Status why) {
  if (why.ok()) why = absl::CancelledError("request gate closed");
  for (auto& then : Decide(why)) then(why);
}

void RequestGate::OnDecided(Decided then) {
  absl::Status outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!decided_) {
      waiting_.push_back(std::move(then));
      return;
    }
    outcome = outcome_;
  }
  then(outcome);
}

}  // namespace wsync
