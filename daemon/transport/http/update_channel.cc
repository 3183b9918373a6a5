#include "daemon/transport/http/update_channel.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/transport/http/http_message_reader.h"

namespace wsync {
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

absl::Time ChannelCall::ended_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_at_;
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

UpdateChannel::UpdateChannel(std::string base_url) : target_(ParseHttpTarget(base_url)) {}

UpdateChannel::~UpdateChannel() { Cancel("the update's engine connection was closed"); }

absl::StatusOr<std::shared_ptr<ChannelCall>> UpdateChannel::Post(const std::string& path,
                                                                 const std::string& json_body,
                                                                 absl::Time deadline) {
  std::lock_guard<std::mutex> write(write_mu_);
  if (!target_.status.ok()) return target_.status;
  bool reopen = !fd_.valid();
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    // A connection that failed a request, or was cancelled, stays failed: the update it carries
    // is over.
    if (!broken_.ok()) return broken_;
    if (!ended_.ok()) reopen = true;
    if (open_.empty() && absl::Now() - last_activity_ >= kReopenAfterIdle) reopen = true;
  }
  if (reopen) {
    CloseLocked(absl::UnavailableError("connection reopened"));
    WSYNC_RETURN_IF_ERROR(ConnectLocked());
  }
  const std::string request =
      absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: ", target_.host_header,
                   "\r\nContent-Type: application/json\r\nContent-Length: ", json_body.size(),
                   "\r\n\r\n", json_body);
  // Queued before its bytes go: the answer may come before this thread returns from the write.
  auto call = std::shared_ptr<ChannelCall>(new ChannelCall());
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    open_.push_back(call);
  }
  absl::Status written = WriteAll(fd_.get(), request.data(), request.size(), deadline);
  if (!written.ok()) {
    // Half a request leaves the connection unusable for the ones behind it.
    absl::Status failed =
        written.code() == absl::StatusCode::kDeadlineExceeded
            ? absl::DeadlineExceededError(absl::StrCat("POST ", path,
                                                       ": the engine did not take the request "
                                                       "before the deadline (engine hung?)"))
            : absl::UnavailableError(
                  absl::StrCat("POST ", path, ": writing the request failed: ", written.message(),
                               " (engine process died or restarted?)"));
    {
      // A Cancel that shut the socket under this write has already said why.
      std::lock_guard<std::mutex> lock(open_mu_);
      if (broken_.ok()) broken_ = failed;
      failed = broken_;
    }
    CloseLocked(failed);
    return failed;
  }
  call->written_at_ = absl::Now();
  std::lock_guard<std::mutex> lock(open_mu_);
  last_activity_ = call->written_at_;
  return call;
}

void UpdateChannel::Cancel(absl::string_view why) {
  {
    // A Post blocked writing to an engine that stopped reading holds write_mu_ until its
    // deadline; shutting the socket first ends that write now.
    std::lock_guard<std::mutex> lock(fd_mu_);
    {
      // Before the shutdown: the reader, seeing the connection end, reports this reason and not
      // an engine that closed it.
      std::lock_guard<std::mutex> open(open_mu_);
      const absl::Status cancelled = absl::CancelledError(why);
      if (ended_.ok()) ended_ = cancelled;
      if (broken_.ok()) broken_ = cancelled;
    }
    if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
  }
  std::lock_guard<std::mutex> write(write_mu_);
  CloseLocked(absl::CancelledError(why));
}

absl::Status UpdateChannel::ConnectLocked() {
  // One attempt: a refused connection means the engine is down, not starting.
  auto fd = ConnectTcp(target_.host, target_.port, absl::Now());
  if (!fd.ok()) {
    // One word for every cause (refused, unresolvable, unroutable), as for control requests; the
    // cause goes to the debug log.
    WSYNC_LOG(Debug, target_.base_url,
              ": cannot connect for the update requests: ", fd.status().message());
    return absl::UnavailableError("engine unreachable: cannot connect for the update requests");
  }
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    fd_ = std::move(*fd);
  }
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    ended_ = absl::OkStatus();
    last_activity_ = absl::Now();
  }
  reader_ = std::thread([this, fd = fd_.get()] { ReadLoop(fd); });
  return absl::OkStatus();
}

void UpdateChannel::CloseLocked(absl::Status why) {
  if (fd_.valid()) {
    {
      std::lock_guard<std::mutex> lock(open_mu_);
      if (ended_.ok()) ended_ = why;
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
  }
  if (reader_.joinable()) reader_.join();
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    fd_.reset();
  }
  FailOpen(why);
}

void UpdateChannel::FailOpen(const absl::Status& why) {
  std::deque<std::shared_ptr<ChannelCall>> failing;
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    failing.swap(open_);
  }
  for (auto& call : failing) call->Finish(why);
}

void UpdateChannel::ReadLoop(int fd) {
  HttpMessageReader</*kRequest=*/false> reader(64ull << 20);
  std::vector<HttpMessageReader<false>::Message> answers;
  char chunk[64 << 10];
  // Ends the connection from the reader's side; later requests go on a new one unless `sticky`.
  auto end = [&](absl::Status why, bool sticky) {
    {
      std::lock_guard<std::mutex> lock(open_mu_);
      if (ended_.ok()) ended_ = why;
      why = ended_;
      if (sticky && broken_.ok()) broken_ = why;
    }
    FailOpen(why);
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
    if (n <= 0) {
      size_t unanswered;
      {
        std::lock_guard<std::mutex> lock(open_mu_);
        unanswered = open_.size();
      }
      end(absl::UnavailableError(
              absl::StrCat("the engine closed the connection with ", unanswered,
                           " update request(s) unanswered (engine process died or restarted?)")),
          unanswered > 0);
      return;
    }
    answers.clear();
    if (absl::Status read = reader.Feed(chunk, static_cast<size_t>(n), &answers); !read.ok()) {
      end(absl::InternalError(absl::StrCat("unreadable HTTP answer: ", read.message())), true);
      return;
    }
    for (auto& res : answers) {
      std::shared_ptr<ChannelCall> call;
      {
        std::lock_guard<std::mutex> lock(open_mu_);
        if (!open_.empty()) {
          call = std::move(open_.front());
          open_.pop_front();
        }
        last_activity_ = absl::Now();
      }
      if (call == nullptr) {
        end(absl::InternalError("answered a request that was never sent"), true);
        return;
      }
      call->Finish(HttpReply{static_cast<int>(res.result_int()), std::move(res.body()),
                             std::string(res[boost::beast::http::field::content_type])});
      if (!res.keep_alive()) {
        // The server drops whatever was pipelined behind this answer.
        size_t behind;
        {
          std::lock_guard<std::mutex> lock(open_mu_);
          behind = open_.size();
        }
        end(absl::UnavailableError(absl::StrCat(
                "the engine closes its connection after each answer (Connection: close), so the ",
                behind, " update request(s) pipelined behind it were dropped")),
            behind > 0);
        return;
      }
    }
  }
}

double AnswerSeconds(const ChannelCall* call) {
  if (call == nullptr) return 0;
  const absl::Time ended = call->ended_at();
  if (ended == absl::InfinitePast() || call->written_at() == absl::InfinitePast()) return 0;
  return absl::ToDoubleSeconds(ended - call->written_at());
}

}  // namespace wsync
