#ifndef WSYNC_COMMON_TICKER_H_
#define WSYNC_COMMON_TICKER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/time/time.h"

namespace wsync {

// Runs `tick` every `period` on a thread of its own, first one period after construction, until
// destroyed; the destructor returns once a tick in progress has ended.
class Ticker {
 public:
  Ticker(absl::Duration period, std::function<void()> tick)
      : period_(period), tick_(std::move(tick)), thread_([this] { Run(); }) {}
  ~Ticker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, absl::ToChronoNanoseconds(period_), [&] { return stopping_; })) {
      lock.unlock();
      tick_();
      lock.lock();
    }
  }

  const absl::Duration period_;
  const std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;     // last: it starts once the members above exist
};

}  // namespace wsync

#endif  // WSYNC_COMMON_TICKER_H_
