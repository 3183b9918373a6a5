#ifndef WSYNC_DAEMON_CORE_REQUEST_GATE_H_
#define WSYNC_DAEMON_CORE_REQUEST_GATE_H_

#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/status.h"

namespace wsync {

// Holds back one bucket's launch (its engine requests, then its broadcast) until the previous
// bucket's launch is done: requests then reach each engine's connection, and broadcasts rank 0's
// stream, in bucket order. Closed instead when an earlier bucket failed, so nothing more of the
// update goes out. (See BucketTransfer for why a broadcast never goes before its requests.)
class RequestGate {
 public:
  using Decided = std::function<void(const absl::Status&)>;
  void Open();
  // The bucket will never be launched (an earlier bucket failed, or this one was cancelled).
  // The first of Open and Close wins.
  void Close(absl::Status why);
  // Runs `then` with the outcome (OK when opened) once the gate is decided: at once if it is,
  // else in the thread that decides it, before Open or Close returns. Never run for a gate that
  // is never decided.
  void OnDecided(Decided then);

 private:
  mutable std::mutex mu_;
  bool decided_ = false;
  absl::Status outcome_;
  std::vector<Decided> waiting_;
  // Decides under mu_; returns what to run once it is released.
  std::vector<Decided> Decide(absl::Status outcome);
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_REQUEST_GATE_H_
