#include "daemon/transport/http/update_channel.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/transport/http/http_message_reader.h"

namespace wsync {
namespace {

// Whatever an engine serves there (a 404 too) shows how it treats a connection.
constexpr char kProbePath[] = "/health";

}  // namespace

// A request and where it stands. Guarded by the channel's mu_.
struct UpdateChannel::Request {
  enum class State { kQueued, kWriting, kWritten, kAnswered, kFailed };
  std::shared_ptr<ChannelCall> call;
  std::string path;
  std::string bytes;
  absl::Time deadline;
  bool probe = false;  // the channel's own GET: never re-sent, its answer goes to no caller
  State state = State::kQueued;
  bool in_write = false;  // the writer is writing its bytes (whatever the state says meanwhile)
  absl::Status failure;   // why, when kFailed
};

absl::StatusOr<HttpReply> ChannelCall::Wait(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return done_; })) {
    return absl::DeadlineExceededError("no answer before the deadline");
  }
  return outcome_;
}

void ChannelCall::OnDone(Done then) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    then_ = std::move(then);
    return;
  }
  absl::StatusOr<HttpReply> outcome = outcome_;
  lock.unlock();
  then(outcome);
}

absl::Time ChannelCall::written_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_at_;
}

absl::Time ChannelCall::ended_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_at_;
}

void ChannelCall::SetWrittenAt(absl::Time at) {
  std::lock_guard<std::mutex> lock(mu_);
  written_at_ = at;
}

void ChannelCall::Finish(absl::StatusOr<HttpReply> outcome) {
  Done then;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    outcome_ = std::move(outcome);
    ended_at_ = absl::Now();
    then = std::move(then_);
    cv_.notify_all();
  }
  if (then) then(outcome_);
}

UpdateChannel::UpdateChannel(std::string base_url, std::optional<ConnectionHabits> known)
    : target_(ParseHttpTarget(base_url)), habits_(known) {}

UpdateChannel::~UpdateChannel() {
  Cancel("the update's engine connection was closed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  CloseConnection(absl::CancelledError("the update's engine connection was closed"));
}

ConnectionHabits UpdateChannel::habits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return habits_.value_or(ConnectionHabits{});
}

absl::StatusOr<std::shared_ptr<ChannelCall>> UpdateChannel::Post(const std::string& path,
                                                                 const std::string& json_body,
                                                                 absl::Time deadline) {
  if (!target_.status.ok()) return target_.status;
  auto request = std::make_shared<Request>();
  request->call = std::shared_ptr<ChannelCall>(new ChannelCall());
  request->path = path;
  request->deadline = deadline;
  request->bytes =
      absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: ", target_.host_header,
                   "\r\nContent-Type: application/json\r\nContent-Length: ", json_body.size(),
                   "\r\n\r\n", json_body);
  std::unique_lock<std::mutex> lock(mu_);
  // A channel that failed a request, or was cancelled, stays failed: the update it carries is
  // over.
  if (!broken_.ok()) return broken_;
  if (!writer_.joinable()) writer_ = std::thread([this] { WriteLoop(); });
  queued_.push_back(request);
  cv_.notify_all();
  using State = Request::State;
  cv_.wait(lock, [&] {
    if (request->in_write) return false;  // its outcome is the write's
    if (request->state != State::kQueued && request->state != State::kWriting) return true;
    // A server that takes one request at a time: this one waits for the answers before it.
    return request->state == State::kQueued && habits_.has_value() && !habits_->pipelines &&
           (!written_.empty() || queued_.front() != request);
  });
  if (request->state == State::kFailed && request->call->written_at() == absl::InfinitePast()) {
    return request->failure;
  }
  return request->call;
}

void UpdateChannel::Cancel(absl::string_view why) {
  std::vector<std::shared_ptr<Request>> ending;
  absl::Status failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Status cancelled = absl::CancelledError(why);
    if (ended_.ok()) ended_ = cancelled;
    if (broken_.ok()) broken_ = cancelled;
    failure = broken_;
    for (auto* list : {&written_, &queued_}) {
      for (auto& r : *list) {
        r->state = Request::State::kFailed;
        r->failure = failure;
        ending.push_back(std::move(r));
      }
      list->clear();
    }
  }
  cv_.notify_all();
  {
    // A write blocked on an engine that stopped reading ends now, not at its deadline; the
    // reader, seeing the connection end, finds nothing left to fail.
    std::lock_guard<std::mutex> lock(fd_mu_);
    if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
  }
  for (auto& r : ending) r->call->Finish(failure);
}

bool UpdateChannel::WriterHasWorkLocked() const {
  if (stop_) return true;
  if (queued_.empty()) return false;
  if (!broken_.ok()) return true;
  // The probe's requests go first; the rest wait for its verdict.
  if (probing_) return queued_.front()->probe;
  if (!habits_.has_value()) return true;  // connects, then probes
  return habits_->pipelines || written_.empty();
}

void UpdateChannel::WriteLoop() {
  using State = Request::State;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (probing_ && !WriterHasWorkLocked()) {
      // The probe's answers, or its time runs out.
      if (!cv_.wait_until(lock, absl::ToChronoTime(probe_until_),
                          [&] { return !probing_ || stop_ || !broken_.ok(); })) {
        // Out of time: what the answers so far say.
        probing_ = false;
        if (probe_answers_ == 0) {
          broken_ = absl::UnavailableError(absl::StrCat(
              "the engine did not answer GET ", kProbePath, " on the update connection within ",
              absl::FormatDuration(kProbeWait), " (is it an HTTP server? is it hung?)"));
        } else {
          // The first answer kept the connection, the second never came: the server answers one
          // request at a time. The connection, with a request open, is not used again.
          habits_ = ConnectionHabits{/*keeps_connections=*/true, /*pipelines=*/false};
          if (ended_.ok()) ended_ = absl::UnavailableError("the probe's second request is open");
          // Its connection is not used again: the unanswered probe goes with it, never counted as
          // an update request.
          std::vector<std::shared_ptr<Request>> dropped;
          for (auto it = written_.begin(); it != written_.end();) {
            if ((*it)->probe) {
              (*it)->state = Request::State::kFailed;
              dropped.push_back(std::move(*it));
              it = written_.erase(it);
            } else {
              ++it;
            }
          }
          lock.unlock();
          for (auto& r : dropped) r->call->Finish(absl::CancelledError("probe unanswered"));
          lock.lock();
          WSYNC_LOG(Info, target_.base_url,
                    ": answers no pipelined request; one update request in flight at a time");
        }
        cv_.notify_all();
      } else if (stop_ || !broken_.ok()) {
        probing_ = false;  // the channel is over; its requests fail below
      }
      continue;
    }
    cv_.wait(lock, [&] { return WriterHasWorkLocked(); });
    if (stop_) break;
    if (!broken_.ok()) {
      std::vector<std::shared_ptr<Request>> failing(queued_.begin(), queued_.end());
      queued_.clear();
      const absl::Status failure = broken_;
      for (auto& r : failing) {
        r->state = State::kFailed;
        r->failure = failure;
      }
      cv_.notify_all();
      lock.unlock();
      for (auto& r : failing) r->call->Finish(failure);
      lock.lock();
      continue;
    }
    const bool idle = written_.empty() && absl::Now() - last_activity_ >= kReopenAfterIdle;
    if (!connected_ || !ended_.ok() || idle) {
      lock.unlock();
      CloseConnection(absl::UnavailableError("connection reopened"));
      absl::Status connected = Connect();
      lock.lock();
      if (!connected.ok()) {
        if (broken_.ok()) broken_ = connected;
        continue;
      }
      if (!habits_.has_value() && !probing_) {
        for (int i = 0; i < 2; ++i) {
          auto probe = std::make_shared<Request>();
          probe->call = std::shared_ptr<ChannelCall>(new ChannelCall());
          probe->path = kProbePath;
          probe->probe = true;
          probe->deadline = absl::Now() + kProbeWait;
          probe->bytes = absl::StrCat("GET ", kProbePath,
                                      " HTTP/1.1\r\nHost: ", target_.host_header, "\r\n\r\n");
          queued_.insert(queued_.begin() + i, std::move(probe));
        }
        probing_ = true;
        probe_answers_ = 0;
        probe_until_ = absl::Now() + kProbeWait;
      }
      continue;
    }
    std::shared_ptr<Request> next = queued_.front();
    queued_.pop_front();
    // In the list before its bytes go: the answer may come before the write returns.
    written_.push_back(next);
    next->state = State::kWriting;
    next->in_write = true;
    const int fd = connection_fd_;
    lock.unlock();
    absl::Status written = WriteAll(fd, next->bytes.data(), next->bytes.size(), next->deadline);
    const absl::Time now = absl::Now();
    lock.lock();
    next->in_write = false;
    cv_.notify_all();
    if (!written.ok() && next->state == State::kWriting) {
      // A server that answered with `Connection: close` and closed makes this write fail before
      // the reader may have read that answer: the reader's verdict (queued again, or failed with
      // the connection) decides, and it comes as soon as it reads the rest of the connection.
      cv_.wait_until(lock, absl::ToChronoTime(std::min(next->deadline, now + absl::Seconds(2))),
                     [&] { return !reader_running_ || next->state != State::kWriting; });
    }
    // Written whole and then failed with its connection: Post returns the call, which carries the
    // error (an error from Post means the bytes never went out).
    if (written.ok() && next->state == State::kFailed) next->call->SetWrittenAt(now);
    if (next->state == State::kQueued || next->state == State::kFailed ||
        (!written.ok() && next->state == State::kAnswered)) {
      // Queued again behind an answer that closed the connection, or ended by Cancel or by the
      // connection's end: whatever the write did, it is accounted for.
      continue;
    }
    if (!written.ok()) {
      // Half a request leaves the connection unusable for the ones behind it.
      absl::Status failed =
          written.code() == absl::StatusCode::kDeadlineExceeded
              ? absl::DeadlineExceededError(absl::StrCat("POST ", next->path,
                                                         ": the engine did not take the request "
                                                         "before the deadline (engine hung?)"))
              : absl::UnavailableError(absl::StrCat(
                    "POST ", next->path, ": writing the request failed: ", written.message(),
                    " (engine process died or restarted?)"));
      if (broken_.ok()) broken_ = failed;
      failed = broken_;
      lock.unlock();
      CloseConnection(failed);
      lock.lock();
      continue;
    }
    // Answered before the write returned (an early error answer): no answer time to measure.
    if (next->state != State::kWriting) continue;
    next->state = State::kWritten;
    next->call->SetWrittenAt(now);
    last_activity_ = now;
    cv_.notify_all();
  }
  lock.unlock();
  CloseConnection(absl::CancelledError("the update's engine connection was closed"));
}

absl::Status UpdateChannel::Connect() {
  // One attempt: a refused connection means the engine is down, not starting.
  auto fd = ConnectTcp(target_.host, target_.port, absl::Now());
  if (!fd.ok()) {
    // One word for every cause (refused, unresolvable, unroutable), as for control requests; the
    // cause goes to the debug log.
    WSYNC_LOG(Debug, target_.base_url,
              ": cannot connect for the update requests: ", fd.status().message());
    return absl::UnavailableError("engine unreachable: cannot connect for the update requests");
  }
  const int raw = fd->get();
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    fd_ = std::move(*fd);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = absl::OkStatus();
    last_activity_ = absl::Now();
    connected_ = true;
    connection_fd_ = raw;
    reader_running_ = true;
  }
  reader_ = std::thread([this, raw] { ReadLoop(raw); });
  return absl::OkStatus();
}

void UpdateChannel::CloseConnection(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
  }
  if (reader_.joinable()) reader_.join();
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    fd_.reset();
  }
  std::vector<std::shared_ptr<Request>> failing;
  absl::Status failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = false;
    connection_fd_ = -1;
    if (ended_.ok()) ended_ = why;
    failure = why;
    failing.assign(written_.begin(), written_.end());
    written_.clear();
    for (auto& r : failing) {
      r->state = Request::State::kFailed;
      r->failure = failure;
    }
  }
  cv_.notify_all();
  for (auto& r : failing) r->call->Finish(failure);
}

void UpdateChannel::LearnLocked(bool closes) {
  const ConnectionHabits was = habits_.value_or(ConnectionHabits{});
  if (probing_) {
    ++probe_answers_;
    if (!closes && probe_answers_ < 2) return;
    probing_ = false;
    habits_ = ConnectionHabits{/*keeps_connections=*/!closes, /*pipelines=*/!closes};
  } else if (closes) {
    habits_ = ConnectionHabits{/*keeps_connections=*/false, /*pipelines=*/false};
  }
  if (habits_.has_value() && (was.pipelines && !habits_->pipelines)) {
    WSYNC_LOG(Info, target_.base_url,
              ": closes its connection after answers (HTTP/1.0 or Connection: close); one update "
              "request in flight at a time, a connection each where it closes");
  }
}

void UpdateChannel::ReadLoop(int fd) {
  ReadAnswers(fd);
  {
    std::lock_guard<std::mutex> lock(mu_);
    reader_running_ = false;
  }
  cv_.notify_all();
}

void UpdateChannel::ReadAnswers(int fd) {
  using State = Request::State;
  HttpMessageReader</*kRequest=*/false> reader(64ull << 20);
  std::vector<HttpMessageReader<false>::Message> answers;
  char chunk[64 << 10];
  // Ends the connection from the reader's side: its unanswered requests fail, and where an update
  // request is among them every later one too (the engine may have read it). `why` is given the
  // count of update requests unanswered, decided under the same lock that takes them.
  auto end = [&](const std::function<absl::Status(size_t)>& why_for) {
    std::vector<std::shared_ptr<Request>> failing;
    absl::Status why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t updates = 0;
      for (const auto& r : written_) updates += r->probe ? 0 : 1;
      why = why_for(updates);
      if (ended_.ok()) ended_ = why;
      why = ended_;
      if (updates > 0 && broken_.ok()) broken_ = why;
      if (probing_ && updates == 0) {
        // The server closed with only the probe's requests open: after an answer, it is one
        // that closes connections; before any, it is no HTTP server to update.
        probing_ = false;
        if (probe_answers_ > 0) {
          habits_ = ConnectionHabits{/*keeps_connections=*/false, /*pipelines=*/false};
        } else if (broken_.ok()) {
          broken_ = absl::UnavailableError(
              absl::StrCat("the engine closed the update connection without answering GET ",
                           kProbePath, " (is it an HTTP server?)"));
        }
      }
      failing.assign(written_.begin(), written_.end());
      written_.clear();
      for (auto& r : failing) {
        r->state = State::kFailed;
        r->failure = why;
      }
    }
    cv_.notify_all();
    for (auto& r : failing) r->call->Finish(why);
    ::shutdown(fd, SHUT_RDWR);
  };
  while (true) {
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    // ACK at once (Linux resets this after a while): a server that sends an answer's headers and
    // body as two writes without TCP_NODELAY holds the body until the headers are ACKed, and a
    // delayed ACK would add 40 ms to every answer.
    const int quick = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &quick, sizeof(quick));
    answers.clear();
    const bool eof = n <= 0;
    // An answer whose body runs until the close (HTTP/1.0 without Content-Length) ends at it.
    absl::Status read =
        eof ? reader.FeedEof(&answers) : reader.Feed(chunk, static_cast<size_t>(n), &answers);
    if (!read.ok()) {
      end([&](size_t) {
        return absl::InternalError(absl::StrCat("unreadable HTTP answer: ", read.message()));
      });
      return;
    }
    for (auto& res : answers) {
      const bool closes = eof || !res.keep_alive();
      std::shared_ptr<Request> answered;
      std::vector<std::shared_ptr<Request>> unused_probes;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_activity_ = absl::Now();
        if (!written_.empty()) {
          answered = std::move(written_.front());
          written_.pop_front();
          answered->state = State::kAnswered;
          if (answered->probe || closes) LearnLocked(closes);
        }
        if (answered != nullptr && closes) {
          // The server processes nothing more of this connection: what was written behind this
          // answer was never read and goes again, in order, on a new connection.
          while (!written_.empty()) {
            std::shared_ptr<Request> r = std::move(written_.back());
            written_.pop_back();
            if (r->probe) {
              r->state = State::kFailed;
              unused_probes.push_back(std::move(r));
            } else {
              r->state = State::kQueued;
              queued_.push_front(std::move(r));
            }
          }
          if (ended_.ok()) {
            ended_ = absl::UnavailableError("the engine closed the connection after an answer");
          }
        }
      }
      cv_.notify_all();
      if (answered == nullptr) {
        // Nothing was asked (a server's 408 before it closes an idle connection): the connection
        // ends, nothing is lost.
        end([](size_t) {
          return absl::UnavailableError("the engine answered a request that was never sent");
        });
        return;
      }
      answered->call->Finish(HttpReply{static_cast<int>(res.result_int()), std::move(res.body()),
                                       std::string(res[boost::beast::http::field::content_type])});
      for (auto& r : unused_probes) r->call->Finish(absl::CancelledError("probe not needed"));
      if (closes) {
        ::shutdown(fd, SHUT_RDWR);
        return;
      }
    }
    if (eof) {
      end([](size_t updates) {
        return absl::UnavailableError(
            absl::StrCat("the engine closed the connection with ", updates,
                         " update request(s) unanswered (engine process died or restarted?)"));
      });
      return;
    }
  }
}

double AnswerSeconds(const ChannelCall* call) {
  if (call == nullptr) return 0;
  const absl::Time ended = call->ended_at();
  const absl::Time written = call->written_at();
  if (ended == absl::InfinitePast() || written == absl::InfinitePast()) return 0;
  return absl::ToDoubleSeconds(ended - written);
}

}  // namespace wsync
