#include "daemon/engines/http_exchange.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "daemon/transport/http/http_message_reader.h"

namespace wsync {
namespace {

using AnswerReader = HttpMessageReader</*kRequest=*/false>;

// Milliseconds for poll() until `deadline`: rounded up, so a poll never returns just before it.
int PollMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000));
}

// Waits until `fd` is ready for `events` or the deadline passes; false at the deadline.
bool WaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    const int ms = PollMillis(deadline);
    if (ms == 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the next call on the socket says what is wrong
  }
}

// A non-blocking connection to one of `host`'s addresses, tried in turn until the deadline.
absl::StatusOr<UniqueFd> Connect(const std::string& host, uint16_t port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolving ", host, ": ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat(host, " has no address"));
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
      continue;
    }
    if (!WaitReady(fd.get(), POLLOUT, deadline)) {
      last = absl::DeadlineExceededError("no connection before the deadline");
      break;
    }
    int error = 0;
    socklen_t len = sizeof(error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) {
      last = absl::UnavailableError(absl::StrCat("connect: ", std::strerror(error)));
      continue;
    }
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return last;
}

}  // namespace

absl::StatusOr<HttpReply> ExchangeHttp(const std::string& host, uint16_t port,
                                       const std::string& request, const HttpAnswerLimits& limits,
                                       absl::Time deadline, absl::Duration connect_within) {
  auto fd = Connect(host, port, std::min(deadline, absl::Now() + connect_within));
  if (!fd.ok()) return fd.status();
  if (absl::Status written = WriteAll(fd->get(), request.data(), request.size(), deadline);
      !written.ok()) {
    if (written.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError("the engine did not take the request by the deadline");
    }
    return absl::UnavailableError(absl::StrCat("writing the request: ", written.message()));
  }
  AnswerReader reader(limits.body_bytes, limits.header_bytes);
  std::vector<AnswerReader::Message> answers;
  std::vector<char> chunk(64 << 10);
  uint64_t received = 0;
  while (answers.empty()) {
    const ssize_t n = ::recv(fd->get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n > 0) {
      received += static_cast<uint64_t>(n);
      absl::Status fed = reader.Feed(chunk.data(), static_cast<size_t>(n), &answers);
      if (!fed.ok()) return fed;
      continue;
    }
    if (n == 0) {
      absl::Status ended = reader.FeedEof(&answers);
      if (!ended.ok()) return ended;
      if (answers.empty()) {
        return absl::UnavailableError(
            absl::StrCat("the engine closed the connection after ", received, " bytes"));
      }
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    if (!WaitReady(fd->get(), POLLIN, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no whole answer by the deadline (", received, " bytes received)"));
    }
  }
  AnswerReader::Message& answer = answers.front();
  return HttpReply{static_cast<int>(answer.result_int()), std::move(answer.body()),
                   std::string(answer[boost::beast::http::field::content_type])};
}

}  // namespace wsync
