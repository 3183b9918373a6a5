#ifndef WSYNC_DAEMON_TRANSPORT_HTTP_UPDATE_CHANNEL_H_
#define WSYNC_DAEMON_TRANSPORT_HTTP_UPDATE_CHANNEL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/net.h"
#include "daemon/core/http_reply.h"
#include "daemon/transport/http/http_target.h"

namespace wsync {

// How an engine's HTTP server treats a connection. An UpdateChannel learns it on its first
// connection (two pipelined `GET /health`: any answer, a 404 too, shows the habits) and from every
// answer after.
struct ConnectionHabits {
  // Its answers keep the connection open (HTTP/1.1 without `Connection: close`).
  bool keeps_connections = true;
  // It answers a request written before the previous one was answered.
  bool pipelines = true;
};

// One request on an UpdateChannel, from the moment it was queued until the engine answers.
class ChannelCall {
 public:
  using Done = std::function<void(const absl::StatusOr<HttpReply>&)>;

  // The engine's answer; DEADLINE_EXCEEDED when the deadline passes first (the call stays open).
  absl::StatusOr<HttpReply> Wait(absl::Time deadline);
  // Runs `then` with the outcome once the call ends: at once if it has, else in the channel's
  // reader or writer thread (so it must not block on the channel).
  void OnDone(Done then);
  // When its bytes were last written (a request re-sent is written twice); InfinitePast while it
  // waits behind an unanswered request.
  absl::Time written_at() const;
  // When the answer (or the error) came; InfinitePast before.
  absl::Time ended_at() const;

 private:
  friend class UpdateChannel;
  ChannelCall() = default;
  void Finish(absl::StatusOr<HttpReply> outcome);
  void SetWrittenAt(absl::Time at);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::StatusOr<HttpReply> outcome_;
  absl::Time written_at_ = absl::InfinitePast();
  absl::Time ended_at_ = absl::InfinitePast();
  Done then_;
};

// Seconds from the call's request written to its answer (including any wait behind the requests
// before it on its connection); 0 for a call that is null or has not ended.
double AnswerSeconds(const ChannelCall* call);

// The weight-update requests of one update to one engine, in order. Where the server keeps its
// connections and answers pipelined requests (what its first connection's probe and every answer
// since say), they are written on one keep-alive HTTP/1.1 connection without waiting for answers:
// an HTTP/1.1 server answers a connection's requests one at a time, in the order they came
// (uvicorn, which serves SGLang, holds a request back until the previous one's response is
// complete), so request k+1 may be written while bucket k is still on the wire and the engine
// cannot take it first. Separate connections give no such order. Where it does not (HTTP/1.0,
// `Connection: close` after each answer or after some), one request is in flight at a time, each
// on a new connection when the last one closed.
//
// A request is re-sent only when it was queued behind an answer that closed the connection
// (`Connection: close`, or HTTP/1.0 without keep-alive): such a server processes no further
// request of that connection (RFC 9112, 9.6), so the engine never read it. Any other close with
// requests unanswered fails them and every later request: an engine that began an update and lost
// its request would hang its collective.
//
// A writer thread writes the requests, a reader thread per connection takes the answers. A
// connection left idle is reopened before the next request, so a server's keep-alive timeout
// between updates (or slow buckets) never meets a request in flight.
class UpdateChannel {
 public:
  // base_url: "http://host:port". `known`: the server's habits where already known (the probe is
  // skipped).
  explicit UpdateChannel(std::string base_url,
                         std::optional<ConnectionHabits> known = std::nullopt);
  ~UpdateChannel();
  UpdateChannel(const UpdateChannel&) = delete;
  UpdateChannel& operator=(const UpdateChannel&) = delete;

  // Queues a JSON POST behind every earlier request and returns once it is written, or waits
  // behind an unanswered request of a server that takes one at a time. Errors say what went
  // wrong, not which engine (the caller names it): UNAVAILABLE when the engine cannot be reached,
  // DEADLINE_EXCEEDED when it does not take the request's bytes before the deadline, CANCELLED
  // after Cancel. A request that fails after Post returned ends its call with the error.
  absl::StatusOr<std::shared_ptr<ChannelCall>> Post(const std::string& path,
                                                    const std::string& json_body,
                                                    absl::Time deadline);
  // Ends the channel: calls still open or queued end CANCELLED with `why`, and later Posts fail.
  void Cancel(absl::string_view why);
  const std::string& base_url() const { return target_.base_url; }
  // What the channel knows of the server's habits (the defaults before its probe answered).
  ConnectionHabits habits() const;

  // A connection idle this long is reopened before the next request (uvicorn closes idle
  // keep-alive connections after 5 s).
  static constexpr absl::Duration kReopenAfterIdle = absl::Seconds(1);
  // How long the first connection's probe waits for its two answers.
  static constexpr absl::Duration kProbeWait = absl::Seconds(5);

 private:
  struct Request;
  void WriteLoop();
  // The reader thread: ReadAnswers, then says it is done.
  void ReadLoop(int fd);
  void ReadAnswers(int fd);
  // Writer thread only: opens a connection and starts its reader.
  absl::Status Connect();
  // Writer thread (or the destructor once it is gone): closes the connection and joins its reader;
  // requests written on it and unanswered end with `why`.
  void CloseConnection(const absl::Status& why);
  // Called with mu_ held: whether the writer has something to do now.
  bool WriterHasWorkLocked() const;
  // Called with mu_ held: the probe's verdict once its first answer closed or its second came.
  void LearnLocked(bool closes);

  const HttpTarget target_;

  mutable std::mutex mu_;  // guards everything below but fd_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queued_;   // not yet written, in order
  std::deque<std::shared_ptr<Request>> written_;  // written on the connection, not yet answered
  absl::Status ended_;   // why the current connection can take no more requests
  absl::Status broken_;  // set when a request failed or on Cancel: later ones fail with it
  absl::Time last_activity_ = absl::InfinitePast();  // last request written or answer read
  bool connected_ = false;
  int connection_fd_ = -1;  // the connection's descriptor, for the writer's writes
  bool reader_running_ = false;
  std::optional<ConnectionHabits> habits_;
  bool probing_ = false;  // the probe's requests are out and not yet all answered
  int probe_answers_ = 0;
  absl::Time probe_until_ = absl::InfinitePast();
  bool stop_ = false;
  std::thread writer_;

  std::mutex fd_mu_;  // guards fd_ against Cancel's shutdown
  UniqueFd fd_;
  std::thread reader_;  // the writer's (or the destructor's) to start and join
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_HTTP_UPDATE_CHANNEL_H_
