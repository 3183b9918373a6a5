#ifndef WSYNC_DAEMON_RELAY_RELAY_CHANNEL_H_
#define WSYNC_DAEMON_RELAY_RELAY_CHANNEL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/relay/subscription.h"
#include "wsync/v1/relay.pb.h"

namespace wsync {

// One admitted subscription's stream as the upstream's relay group uses it: requests go down,
// each answered by a reply with its id. The service's stream thread delivers the replies and shuts
// the channel down before the stream goes; any thread may send and wait. Every wait is bounded:
// requests are written by a thread of the channel's own, so a downstream that stops reading
// stalls no sender (its queue fills and the subscription is cancelled), and a request not
// answered by its deadline cancels the subscription (the downstream subscribes again afresh).
// Every waiter hears at once when the stream ends.
class RelayChannel {
 public:
  // Writes one message on the stream (false once it is broken); `cancel` ends the stream. Both
  // are called only until Shutdown returns.
  using Writer = std::function<bool(const v1::RelayDown&)>;
  RelayChannel(std::string subscriber_id, RelaySubscription subscription, Writer write,
               std::function<void()> cancel);
  ~RelayChannel();
  RelayChannel(const RelayChannel&) = delete;
  RelayChannel& operator=(const RelayChannel&) = delete;

  // The most requests queued for writing at once: a downstream that reads nothing is cut off.
  static constexpr size_t kMaxQueued = 256;

  const std::string& subscriber_id() const { return subscriber_id_; }
  const RelaySubscription& subscription() const { return subscription_; }
  // "node rollout-1 (s3)", for messages.
  std::string Describe() const;

  // Queues `request` with a fresh id, which it returns. UNAVAILABLE once the stream ended.
  absl::StatusOr<uint64_t> Send(v1::RelayRequest request);
  // The reply to request `id`: UNAVAILABLE once the stream ended without it; DEADLINE_EXCEEDED at
  // the deadline, or once the downstream said nothing of it (sent, or progress) for `silence`;
  // either also cancels the subscription. A reply is taken once.
  absl::StatusOr<v1::RelayReply> Await(uint64_t id, absl::Time deadline,
                                       absl::Duration silence = absl::InfiniteDuration());
  // Send, then Await.
  absl::StatusOr<v1::RelayReply> Call(v1::RelayRequest request, absl::Time deadline,
                                      absl::Duration silence = absl::InfiniteDuration());
  // The reply to `id` will not be waited for: it is dropped when it comes.
  void Forget(uint64_t id);

  // The stream's reader: a reply arrived. INVALID_ARGUMENT for an id never sent or answered
  // already (the stream is then ended as a protocol error).
  absl::Status Deliver(v1::RelayReply reply);
  // The stream's reader: the downstream still works on request `id` (RelayProgress). Progress on
  // a request answered or given up on is ignored; INVALID_ARGUMENT for an id never sent.
  absl::Status Progress(uint64_t id);
  // The stream ended (`why` says how; OK: it just ended); waiters and later calls hear it.
  void Close(absl::Status why);
  // Ends the subscription from this side (the upstream gives up on the downstream).
  void Cancel();
  // Called by the stream's owner before the stream goes: closes the channel, cancels the stream
  // so that a write in progress returns, and waits for the writer; `write` and `cancel` are not
  // called after it returns.
  void Shutdown();
  // OK while the stream lasts; why it ended after.
  absl::Status open() const;
  // The downstream said its pairs are gone (RelayReply.pairs_lost): the group forms again before
  // its next update (RelayTransport::CheckFormed). A join clears it.
  void MarkPairsLost(std::string why);
  void ClearPairsLost();
  // Why the pairs are gone; "" while they are whole.
  std::string pairs_lost() const;
  // The version the downstream's resident copy holds whole, as it said at the update's begin
  // (RelayReply.resident_version; "" none): deltas of the update may be sent against it.
  void set_resident_version(std::string version);
  std::string resident_version() const;

 private:
  void WriteLoop();

  const std::string subscriber_id_;
  const RelaySubscription subscription_;
  const Writer write_;
  const std::function<void()> cancel_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  struct Pending {
    std::optional<v1::RelayReply> reply;  // empty until it arrives
    absl::Time heard;                     // sent, or the downstream's last progress on it
  };
  // Sent, not yet taken by Await.
  std::map<uint64_t, Pending> pending_;
  std::deque<v1::RelayDown> queue_;  // to be written
  absl::Status closed_;              // OK while open
  bool shut_ = false;                // Shutdown ran: write_ and cancel_ are gone
  bool writing_ = false;             // the writer is inside write_
  std::string pairs_lost_;
  std::string resident_version_;
  std::thread writer_;
};

// A reply's status, its text sanitized (it comes from the peer) and prefixed by `who`.
absl::Status ReplyStatus(const v1::RelayReply& reply, const std::string& who);

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RELAY_CHANNEL_H_
