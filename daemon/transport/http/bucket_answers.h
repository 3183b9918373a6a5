#ifndef WSYNC_DAEMON_TRANSPORT_HTTP_BUCKET_ANSWERS_H_
#define WSYNC_DAEMON_TRANSPORT_HTTP_BUCKET_ANSWERS_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/transport/http/update_channel.h"

namespace wsync {

// How every transport reads its engines' answers to a bucket and reports a failed bucket: one
// reading of an answer, one combined error, one latch that keeps later buckets from engines that
// are out of step.

// One engine's reply to a bucket request, read by its adapter. The text has group tokens hidden:
// an engine may quote group names (SGLang lists every group it holds when asked for another), and
// answers reach logs and callers.
absl::Status ReadEngineAnswer(const EngineAdapter& adapter, const absl::StatusOr<HttpReply>& reply);

// What one engine's bucket request came to, and when it failed (InfinitePast when it did not).
struct EngineAnswer {
  absl::Status status;
  absl::Time failed_at = absl::InfinitePast();
};

// Waits until `deadline` for the answer to `call`, written on `channel`. An engine that has not
// answered by then is DEADLINE_EXCEEDED at the deadline, and its channel is cancelled: its
// connection closes, so a late answer cannot be read as a later bucket's; the engine may go on
// working on the request, but nothing waits for it.
EngineAnswer WaitEngineAnswer(const EngineAdapter& adapter, ChannelCall& call,
                              UpdateChannel& channel, absl::Time deadline);

// A bucket's failures as one error. Causes are listed in the order they happened, because the
// first caused the rest (an engine's error aborts a collective, which fails the others' receives);
// ties keep the order they were added in. Notes follow the causes.
class BucketFailures {
 public:
  // One failure: `text` names the engine (or rank, or the broadcast) and what happened.
  void Add(absl::Time at, absl::Status status, std::string text);
  // Context after the causes: who was not sent the bucket, what the rendezvous saw.
  void Note(std::string text);
  bool has_causes() const { return !causes_.empty(); }
  bool empty() const { return causes_.empty() && notes_.empty(); }
  // The combined error: the first cause's code (`without_cause`'s without one) and every text,
  // "; "-separated. OK when empty.
  absl::Status Combined(const absl::Status& without_cause) const;

 private:
  struct Cause {
    absl::Time at;
    absl::Status status;
    std::string text;
  };
  std::vector<Cause> causes_;
  std::vector<std::string> notes_;
};

// A formation's latch: once one of its buckets failed, no later bucket may reach its engines,
// which are out of step until the group forms again. Shared by the formation's buckets.
class FailureLatch {
 public:
  void Trip() { tripped_.store(true); }
  bool tripped() const { return tripped_.load(); }

 private:
  std::atomic<bool> tripped_{false};
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_HTTP_BUCKET_ANSWERS_H_
