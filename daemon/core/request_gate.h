#ifndef WSYNC_DAEMON_CORE_REQUEST_GATE_H_
#define WSYNC_DAEMON_CORE_REQUEST_GATE_H_

#include <condition_variable>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace wsync {

// Holds back one bucket until the previous bucket says it may go. Engines take update requests
// one at a time in arrival order, so request k+1 must not reach an engine before it is inside
// request k. The bucket's broadcast waits for the same gate: queued earlier, it would sit on the
// GPU waiting for engines that only host progress can send it (see UpdateRun::SenderLoop).
class RequestGate {
 public:
  void Open();
  // The requests will never be posted (an earlier bucket failed, or this one was cancelled).
  // The first of Open and Close wins.
  void Close(absl::Status why);
  // OK once open; the Close status; DEADLINE_EXCEEDED when the deadline passes first.
  absl::Status Wait(absl::Time deadline);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool decided_ = false;
  absl::Status outcome_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_REQUEST_GATE_H_
