#include "daemon/transport/ipc/stream_bucket.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace wsync {

StreamBucket::StreamBucket(std::vector<std::string> urls,
                           std::vector<std::shared_ptr<StreamResult>> results,
                           std::shared_ptr<IpcFormation> formation, FailureHook on_failure)
    : urls_(std::move(urls)),
      results_(std::move(results)),
      formation_(std::move(formation)),
      on_failure_(std::move(on_failure)) {}

absl::Status StreamBucket::Collect() {
  if (collected_) return combined_;
  collected_ = true;
  BucketFailures failures;
  for (const auto& result : results_) {
    absl::Status s = result->Wait();
    answered_at_ = std::max(answered_at_, result->ended_at());
    // The stream's errors name the engine and rank already; they are reported in engine order.
    if (!s.ok()) failures.Add(absl::InfinitePast(), s, std::string(s.message()));
    statuses_.push_back(std::move(s));
  }
  if (failures.empty()) return combined_ = absl::OkStatus();
  combined_ = failures.Combined(absl::UnknownError(""));
  formation_->latch.Trip();
  if (on_failure_) on_failure_(combined_);
  return combined_;
}

absl::StatusOr<WireTiming> StreamBucket::WaitReusable() {
  absl::Status s = Collect();
  if (!s.ok()) return s;
  return WireTiming{};
}

absl::Status StreamBucket::WaitAnswered(std::vector<EngineOutcome>* outcomes) {
  absl::Status s = Collect();
  for (size_t i = 0; i < urls_.size(); ++i) {
    outcomes->push_back(EngineOutcome{urls_[i], statuses_[i]});
  }
  return s;
}

absl::Time StreamBucket::requests_written_at() const {
  absl::Time last = absl::InfinitePast();
  for (const auto& result : results_) {
    const absl::Time at = result->written_at();
    if (at == absl::InfinitePast()) return at;
    last = std::max(last, at);
  }
  return last;
}

}  // namespace wsync
