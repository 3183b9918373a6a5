#include "common/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace wsync {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int MillisUntil(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(left) + 1;
  return ms > 1000 ? 1000 : static_cast<int>(ms);
}

}  // namespace

absl::StatusOr<UniqueFd> ListenTcp(const std::string& bind_address, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(bind_address.empty() ? nullptr : bind_address.c_str(), service.c_str(),
                       &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve bind address '", bind_address, "': ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address to bind");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = Errno("socket");
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = Errno(absl::StrCat("bind ", bind_address, ":", port));
      continue;
    }
    if (::listen(fd.get(), 128) != 0) {
      last = Errno("listen");
      continue;
    }
    freeaddrinfo(res);
    return fd;
  }
  freeaddrinfo(res);
  return last;
}

absl::StatusOr<uint16_t> LocalPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

void TuneSocket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int buf = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, uint16_t port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  std::string service = std::to_string(port);
  absl::Duration backoff = absl::Milliseconds(10);
  absl::Status last = absl::DeadlineExceededError("connect deadline passed");
  while (true) {
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
    }
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) continue;
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
        freeaddrinfo(res);
        TuneSocket(fd.get());
        return fd;
      }
      last = Errno(absl::StrCat("connect ", host, ":", port));
    }
    freeaddrinfo(res);
    if (absl::Now() + backoff > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "could not connect to ", host, ":", port, " before the deadline (", last.message(), ")"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::Status WriteAll(int fd, const void* data, size_t bytes, absl::Time deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Errno("send");
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("send deadline passed");
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, MillisUntil(deadline));
  }
  return absl::OkStatus();
}

absl::Status ReadExact(int fd, void* data, size_t bytes, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return absl::UnavailableError("peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Errno("recv");
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("receive deadline passed");
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, MillisUntil(deadline));
  }
  return absl::OkStatus();
}

absl::Status ReadExactV(int fd, std::vector<iovec> pieces, absl::Time deadline) {
  size_t next = 0;  // first piece not yet full
  while (next < pieces.size() && pieces[next].iov_len == 0) ++next;
  while (next < pieces.size()) {
    msghdr msg{};
    msg.msg_iov = &pieces[next];
    msg.msg_iovlen = std::min<size_t>(pieces.size() - next, IOV_MAX);
    ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n > 0) {
      size_t got = static_cast<size_t>(n);
      while (got > 0) {
        const size_t take = std::min(got, pieces[next].iov_len);
        pieces[next].iov_base = static_cast<char*>(pieces[next].iov_base) + take;
        pieces[next].iov_len -= take;
        got -= take;
        if (pieces[next].iov_len == 0) ++next;
      }
      while (next < pieces.size() && pieces[next].iov_len == 0) ++next;
      continue;
    }
    if (n == 0) return absl::UnavailableError("peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Errno("recvmsg");
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("receive deadline passed");
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, MillisUntil(deadline));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' has no valid port"));
  }
  return std::make_pair(host, static_cast<uint16_t>(port));
}

namespace {

std::string NumericIp(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof(text));
    return text;
  }
  if (sa->sa_family == AF_INET6) {
    const in6_addr& a6 = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      ::inet_ntop(AF_INET, &a6.s6_addr[12], text, sizeof(text));
    } else {
      ::inet_ntop(AF_INET6, &a6, text, sizeof(text));
    }
    return text;
  }
  return "";
}

uint16_t PortOf(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  if (sa->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
  return 0;
}

}  // namespace

absl::StatusOr<std::string> PeerIp(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return Errno("getpeername");
  std::string ip = NumericIp(reinterpret_cast<sockaddr*>(&addr));
  if (ip.empty()) return absl::InvalidArgumentError("peer is not an IP socket");
  return ip;
}

absl::StatusOr<SocketEnds> SocketEndsOf(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_len = sizeof(local);
  socklen_t peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return Errno("getsockname");
  }
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return Errno("getpeername");
  }
  SocketEnds ends;
  ends.local_ip = NumericIp(reinterpret_cast<sockaddr*>(&local));
  ends.peer_ip = NumericIp(reinterpret_cast<sockaddr*>(&peer));
  if (ends.local_ip.empty() || ends.peer_ip.empty()) {
    return absl::InvalidArgumentError("not an IP socket");
  }
  ends.local_port = PortOf(reinterpret_cast<sockaddr*>(&local));
  ends.peer_port = PortOf(reinterpret_cast<sockaddr*>(&peer));
  return ends;
}

}  // namespace wsync
