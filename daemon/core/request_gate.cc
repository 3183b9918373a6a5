#include "daemon/core/request_gate.h"

#include "absl/time/clock.h"

namespace wsync {

std::vector<RequestGate::Decided> RequestGate::Decide(absl::Status outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  if (decided_) return {};
  decided_ = true;
  outcome_ = std::move(outcome);
  cv_.notify_all();
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

absl::Status RequestGate::Wait(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!decided_) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          "the previous bucket never reached its engines, so this bucket's request was not sent");
    }
    cv_.wait_for(lock, absl::ToChronoMicroseconds(left));
  }
  return outcome_;
}

}  // namespace wsync
