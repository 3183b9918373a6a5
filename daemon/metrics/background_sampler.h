#ifndef WSYNC_DAEMON_METRICS_BACKGROUND_SAMPLER_H_
#define WSYNC_DAEMON_METRICS_BACKGROUND_SAMPLER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace wsync {

// Runs `sample` in a thread of its own, every `interval` and whenever woken, and keeps the last
// result. Readers never run `sample` themselves, so a sample that waits (on an engine, on a group
// that is forming) holds up only this thread, never a scrape: a scrape reads what the last pass
// found. Stop waits for the pass in flight, so `sample` must be bounded in time.
template <typename T>
class BackgroundSampler {
 public:
  struct Sample {
    T value{};
    absl::Time taken = absl::InfinitePast();  // when its pass began; InfinitePast before any
  };

  BackgroundSampler(std::function<T()> sample, absl::Duration interval)
      : sample_(std::move(sample)), interval_(interval) {}
  ~BackgroundSampler() { Stop(); }
  BackgroundSampler(const BackgroundSampler&) = delete;
  BackgroundSampler& operator=(const BackgroundSampler&) = delete;

  // Starts the thread; its first pass begins at once.
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_ || stopping_) return;
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
  }

  // Ends the thread after the pass in flight, if any. Idempotent; no pass runs after it. Called
  // by the sampler's owner, as Start is.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Asks for a pass now, without waiting for it.
  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      requested_ = true;
    }
    cv_.notify_all();
  }

  // What the last finished pass found.
  Sample Latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_;
  }

  // Asks for a pass and waits up to `max_wait` for one begun after this call; the latest one
  // when none finished in time (the pass is held up) or the sampler is stopped.
  Sample Fresh(absl::Duration max_wait) {
    std::unique_lock<std::mutex> lock(mu_);
    const absl::Time asked = absl::Now();
    requested_ = true;
    cv_.notify_all();
    cv_.wait_until(lock, absl::ToChronoTime(asked + max_wait),
                   [&] { return stopping_ || !started_ || latest_.taken >= asked; });
    return latest_;
  }

  uint64_t passes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return passes_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      requested_ = false;
      const absl::Time began = absl::Now();
      lock.unlock();
      T value = sample_();
      lock.lock();
      latest_ = Sample{std::move(value), began};
      ++passes_;
      cv_.notify_all();
      cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_),
                   [&] { return stopping_ || requested_; });
    }
  }

  const std::function<T()> sample_;
  const absl::Duration interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;  // started and joined by the owner's thread only
  bool started_ = false;
  bool stopping_ = false;
  bool requested_ = false;
  Sample latest_;
  uint64_t passes_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_METRICS_BACKGROUND_SAMPLER_H_
