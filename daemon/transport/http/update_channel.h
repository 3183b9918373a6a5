#ifndef WSYNC_DAEMON_TRANSPORT_HTTP_UPDATE_CHANNEL_H_
#define WSYNC_DAEMON_TRANSPORT_HTTP_UPDATE_CHANNEL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/net.h"
#include "daemon/core/http_reply.h"
#include "daemon/transport/http/http_target.h"

namespace wsync {

// One request on an UpdateChannel, from the moment it was written until the engine answers.
class ChannelCall {
 public:
  using Done = std::function<void(const absl::StatusOr<HttpReply>&)>;

  // The engine's answer; DEADLINE_EXCEEDED when the deadline passes first (the call stays open).
  absl::StatusOr<HttpReply> Wait(absl::Time deadline);
  // Runs `then` with the outcome once the call ends: at once if it has, else in the channel's
  // reader thread (so it must not block on the channel).
  void OnDone(Done then);
  absl::Time written_at() const { return written_at_; }
  // When the answer (or the error) came; InfinitePast before.
  absl::Time ended_at() const;

 private:
  friend class UpdateChannel;
  ChannelCall() = default;
  void Finish(absl::StatusOr<HttpReply> outcome);

  absl::Time written_at_ = absl::InfinitePast();  // set once, before Post returns the call
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::StatusOr<HttpReply> outcome_;
  absl::Time ended_at_ = absl::InfinitePast();
  Done then_;
};

// Seconds from the call's request written to its answer (including any wait behind the requests
// before it on its connection); 0 for a call that is null or has not ended.
double AnswerSeconds(const ChannelCall* call);

// The weight-update requests of one update to one engine, written in order on one keep-alive
// HTTP/1.1 connection without waiting for answers (pipelining). An HTTP/1.1 server answers a
// connection's requests one at a time, in the order they came (uvicorn, which serves SGLang,
// holds a request back until the previous one's response is complete), so request k+1 may be
// written while bucket k is still on the wire: the engine cannot take it first. Separate
// connections give no such order.
//
// Post is called by one thread at a time; a reader thread takes the answers. A connection left
// idle is reopened before the next request, so a server's keep-alive timeout between updates (or
// slow buckets) never meets a request in flight.
class UpdateChannel {
 public:
  // base_url: "http://host:port".
  explicit UpdateChannel(std::string base_url);
  ~UpdateChannel();
  UpdateChannel(const UpdateChannel&) = delete;
  UpdateChannel& operator=(const UpdateChannel&) = delete;

  // Writes a JSON POST behind every earlier request. Errors say what went wrong, not which engine
  // (the caller names it): UNAVAILABLE when the engine cannot be
  // reached, DEADLINE_EXCEEDED when it does not take the request's bytes before the deadline,
  // CANCELLED after Cancel.
  absl::StatusOr<std::shared_ptr<ChannelCall>> Post(const std::string& path,
                                                    const std::string& json_body,
                                                    absl::Time deadline);
  // Ends the connection: calls still open end CANCELLED with `why`, and later Posts fail.
  void Cancel(absl::string_view why);
  const std::string& base_url() const { return target_.base_url; }

  // A connection idle this long is reopened before the next request (uvicorn closes idle
  // keep-alive connections after 5 s).
  static constexpr absl::Duration kReopenAfterIdle = absl::Seconds(1);

 private:
  absl::Status ConnectLocked();
  // Closes the connection and waits for its reader; calls still open end with `why`.
  void CloseLocked(absl::Status why);
  void ReadLoop(int fd);
  // Ends every open call with `why`.
  void FailOpen(const absl::Status& why);

  const HttpTarget target_;

  std::mutex write_mu_;  // one writer; guards reader_ and which connection fd_ holds
  std::mutex fd_mu_;     // guards fd_ against Cancel's shutdown (taken without write_mu_)
  UniqueFd fd_;
  std::thread reader_;

  std::mutex open_mu_;                             // guards the members below
  std::deque<std::shared_ptr<ChannelCall>> open_;  // written, not yet answered, in order
  absl::Status ended_;   // why the current connection can take no more requests
  absl::Status broken_;  // set when a request failed or on Cancel: later ones fail with it
  absl::Time last_activity_ = absl::InfinitePast();  // last request written or answer read
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_HTTP_UPDATE_CHANNEL_H_
