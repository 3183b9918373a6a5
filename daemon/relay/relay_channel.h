#ifndef WSYNC_DAEMON_RELAY_RELAY_CHANNEL_H_
#define WSYNC_DAEMON_RELAY_RELAY_CHANNEL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/relay/subscription.h"
#include "wsync/v1/relay.pb.h"

namespace wsync {

// One admitted subscription's stream as the upstream's relay group uses it: requests go down,
// each answered by a reply with its id. The service's stream thread delivers the replies and says
// when the stream ended; any thread may send and wait. Every wait is bounded, and every waiter
// hears at once when the stream ends.
class RelayChannel {
 public:
  // Writes one message on the stream (false once it is broken); `cancel` ends the stream.
  using Writer = std::function<bool(const v1::RelayDown&)>;
  RelayChannel(std::string subscriber_id, RelaySubscription subscription, Writer write,
               std::function<void()> cancel);

  const std::string& subscriber_id() const { return subscriber_id_; }
  const RelaySubscription& subscription() const { return subscription_; }
  // "node rollout-1 (s3)", for messages.
  std::string Describe() const;

  // Sends `request` with a fresh id, which it returns. UNAVAILABLE once the stream ended.
  absl::StatusOr<uint64_t> Send(v1::RelayRequest request);
  // The reply to request `id`: DEADLINE_EXCEEDED at the deadline, UNAVAILABLE once the stream
  // ended without it. A reply is taken once.
  absl::StatusOr<v1::RelayReply> Await(uint64_t id, absl::Time deadline);
  // Send, then Await.
  absl::StatusOr<v1::RelayReply> Call(v1::RelayRequest request, absl::Time deadline);

  // The stream's reader: a reply arrived. INVALID_ARGUMENT for an id never sent or answered
  // already (the stream is then ended as a protocol error).
  absl::Status Deliver(v1::RelayReply reply);
  // The stream ended (`why` says how; OK: it just ended); waiters and later calls hear it. The
  // stream's owner calls it before the stream goes away: no write starts after it.
  void Close(absl::Status why);
  // Ends the stream from this side (the upstream drops the subscriber); Close follows.
  void Cancel();
  // OK while the stream lasts; why it ended after.
  absl::Status open() const;

 private:
  const std::string subscriber_id_;
  const RelaySubscription subscription_;
  const Writer write_;
  const std::function<void()> cancel_;
  std::mutex write_mu_;   // one writer at a time on the stream
  bool writable_ = true;  // guarded by write_mu_; false once Close ran
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  // Sent, not yet taken by Await: empty until its reply arrives.
  std::map<uint64_t, std::optional<v1::RelayReply>> pending_;
  absl::Status closed_;  // OK while open
};

// A reply's status, its text sanitized (it comes from the peer) and prefixed by `who`.
absl::Status ReplyStatus(const v1::RelayReply& reply, const std::string& who);

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RELAY_CHANNEL_H_
