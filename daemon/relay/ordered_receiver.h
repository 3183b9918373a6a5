#ifndef WSYNC_DAEMON_RELAY_ORDERED_RECEIVER_H_
#define WSYNC_DAEMON_RELAY_ORDERED_RECEIVER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace wsync {

// A downstream's receives of a relayed update with several streams (docs/RELAY.md): each stream
// has a worker that receives its buckets in the order they were announced on it, side by side
// with the other streams' workers, and every bucket is handed on (to the local update) in the
// update's order, whichever stream it came on. A bucket's hand-on waits for the one before it;
// since each stream's buckets are announced in the update's order, the next one to hand on is
// always first in some stream's queue, so the workers never wait on each other in a circle.
// Every receive must be bounded (its own deadline, or an abort of its pair).
class OrderedReceiver {
 public:
  struct Job {
    uint64_t index = 0;  // the bucket's place in the update: 0, 1, 2, ... across streams
    size_t stream = 0;
    // On the stream's worker; its status goes to hand_on.
    std::function<absl::Status()> receive;
    // In index order, after receive returned.
    std::function<void(absl::Status received)> hand_on;
  };

  explicit OrderedReceiver(size_t streams);
  // Waits for every job added, then ends the workers.
  ~OrderedReceiver();
  OrderedReceiver(const OrderedReceiver&) = delete;
  OrderedReceiver& operator=(const OrderedReceiver&) = delete;

  size_t streams() const { return workers_.size(); }
  // A new update: its first bucket is `first_index`. FAILED_PRECONDITION while a job is pending
  // (Drain first).
  absl::Status Reset(uint64_t first_index);
  // INVALID_ARGUMENT for a stream out of range or an index other than the one after the last
  // added; the job is then not run.
  absl::Status Add(Job job);
  // Returns once every job added was handed on.
  void Drain();

 private:
  struct Worker {
    std::deque<Job> queue;
    std::thread thread;
  };
  void Work(size_t stream);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t next_hand_on_ = 0;  // the index handed on next
  uint64_t next_add_ = 0;      // the least index Add takes next
  uint64_t pending_ = 0;       // added and not yet handed on
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_ORDERED_RECEIVER_H_
