#ifndef WSYNC_DAEMON_CORE_FAN_OUT_H_
#define WSYNC_DAEMON_CORE_FAN_OUT_H_

#include <cstddef>
#include <thread>
#include <type_traits>
#include <vector>

namespace wsync {

// Calls fn(0) ... fn(n - 1) at once, one thread each, and returns their answers in that order.
// The one way wsyncd asks several engines the same thing: each engine's call is bounded by its
// own timeout, so the slowest engine, not their sum, bounds the whole.
template <class Fn>
auto FanOut(size_t n, Fn&& fn) -> std::vector<std::invoke_result_t<Fn&, size_t>> {
  std::vector<std::invoke_result_t<Fn&, size_t>> answers(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { answers[i] = fn(i); });
  }
  for (auto& t : threads) t.join();
  return answers;
}

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_FAN_OUT_H_
