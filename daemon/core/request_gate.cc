#include "daemon/core/request_gate.h"

#include "absl/time/clock.h"

namespace wsync {

void RequestGate::Open() {
  std::lock_guard<std::mutex> lock(mu_);
  if (decided_) return;
  decided_ = true;
  cv_.notify_all();
}

void RequestGate::Close(absl::Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (decided_) return;
  decided_ = true;
  outcome_ = why.ok() ? absl::CancelledError("request gate closed") : std::move(why);
  cv_.notify_all();
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
