#ifndef WSYNC_DAEMON_CORE_REQUEST_GATE_H_
#define WSYNC_DAEMON_CORE_REQUEST_GATE_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace wsync {

// Holds back one bucket until the previous bucket says it may go. Engines take update requests
// one at a time in arrival order, so request k+1 must not reach an engine before it is inside
// request k. The bucket's broadcast waits for the same gate: queued earlier, it would sit on the
// GPU waiting for engines that only host progress can send it, and a device-synchronising CUDA
// call in wsyncd meanwhile would stall everything until the deadline (seen on H200 with 4 slots).
class RequestGate {
 public:
  using Decided = std::function<void(const absl::Status&)>;
  void Open();
  // The requests will never be posted (an earlier bucket failed, or this one was cancelled).
  // The first of Open and Close wins.
  void Close(absl::Status why);
  // OK once open; the Close status; DEADLINE_EXCEEDED when the deadline passes first.
  absl::Status Wait(absl::Time deadline);
  // Runs `then` with the outcome (OK when opened) once the gate is decided: at once if it is,
  // else in the thread that decides it, before Open or Close returns. Never run for a gate that
  // is never decided.
  void OnDecided(Decided then);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool decided_ = false;
  absl::Status outcome_;
  std::vector<Decided> waiting_;
  // Decides under mu_; returns what to run once it is released.
  std::vector<Decided> Decide(absl::Status outcome);
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_REQUEST_GATE_H_
