// The metrics' background sampler: readers get the last pass's result without running one, a
// pass held up (an engine that does not answer, a group that is forming) holds up no reader, and
// Stop ends the thread.

#include "daemon/metrics/background_sampler.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace wsync {
namespace {

// A sample function that counts its passes and, while `hold` is set, waits until it is cleared.
class Gate {
 public:
  int Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    const int n = ++passes_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !held_; });
    return n;
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  int passes() {
    std::lock_guard<std::mutex> lock(mu_);
    return passes_;
  }
  // Waits (bounded) until pass `n` has begun.
  bool Began(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return passes_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int passes_ = 0;
  bool held_ = false;
};

// Waits (bounded) until the sampler's first pass, which Start begins at once, has ended: a read
// asked after that needs a pass begun after it (one asked before could take the first).
bool FirstPassEnded(const BackgroundSampler<int>& sampler) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (sampler.passes() < 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return sampler.passes() >= 1;
}

TEST(BackgroundSampler, FreshWaitsForAPassBegunAfterItAsked) {
  Gate gate;
  BackgroundSampler<int> sampler([&] { return gate.Pass(); }, absl::Hours(1));
  EXPECT_EQ(sampler.Latest().taken, absl::InfinitePast()) << "nothing before the first pass";
  sampler.Start();
  ASSERT_TRUE(FirstPassEnded(sampler));
  EXPECT_EQ(sampler.Latest().value, 1);
  // The interval is an hour: only asking brings the next pass.
  EXPECT_EQ(sampler.Fresh(absl::Seconds(10)).value, 2);
  EXPECT_EQ(sampler.Fresh(absl::Seconds(10)).value, 3);
  EXPECT_EQ(sampler.Latest().value, 3);
  sampler.Stop();
}

TEST(BackgroundSampler, APassHeldUpHoldsUpNoReader) {
  Gate gate;
  BackgroundSampler<int> sampler([&] { return gate.Pass(); }, absl::Hours(1));
  sampler.Start();
  ASSERT_TRUE(FirstPassEnded(sampler));
  gate.Hold();
  sampler.Wake();
  ASSERT_TRUE(gate.Began(2));
  // Pass 2 does not end: readers get pass 1, a fresh read after its bounded wait.
  EXPECT_EQ(sampler.Latest().value, 1);
  EXPECT_EQ(sampler.Fresh(absl::Milliseconds(50)).value, 1);
  gate.Release();
  // Once released, pass 2 ends and pass 3 (asked for during pass 2) may begin before or after
  // this read asks: what it gets is the first pass begun after its ask, never pass 2.
  const absl::Time asked = absl::Now();
  const auto fresh = sampler.Fresh(absl::Seconds(10));
  EXPECT_GE(fresh.taken, asked);
  EXPECT_GE(fresh.value, 3);
  sampler.Stop();
}

TEST(BackgroundSampler, StopEndsThePassInFlightAndNoneRunsAfter) {
  Gate gate;
  std::atomic<int> after_stop{0};
  std::atomic<bool> stopped{false};
  BackgroundSampler<int> sampler(
      [&] {
        if (stopped) ++after_stop;
        return gate.Pass();
      },
      absl::Milliseconds(1));
  sampler.Start();
  ASSERT_TRUE(gate.Began(3));  // passes run every millisecond on their own
  gate.Hold();
  const int held = gate.passes() + 1;
  ASSERT_TRUE(gate.Began(held));  // that pass waits for the gate
  std::thread stopper([&] {
    sampler.Stop();
    stopped = true;
  });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(stopped) << "Stop waits for the pass in flight";
  gate.Release();
  stopper.join();
  EXPECT_TRUE(stopped);
  EXPECT_EQ(after_stop, 0);
  // Stopped, a fresh read does not wait.
  EXPECT_EQ(sampler.Fresh(absl::Hours(1)).value, held);
}

}  // namespace
}  // namespace wsync
