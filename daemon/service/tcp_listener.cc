#include "daemon/service/tcp_listener.h"

#include <grpcpp/server_builder.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace wsync {

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& address) {
  auto host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  auto fd = ListenTcp(host_port->first, host_port->second);
  if (!fd.ok()) {
    return absl::UnavailableError(
        absl::StrCat("could not listen on TCP ", address, ": ", fd.status().message()));
  }
  // A flood fills a short backlog, and a connection the kernel dropped there comes back only
  // after its SYN's retransmit: a long one lets every connection be taken or closed at once.
  (void)::listen(fd->get(), SOMAXCONN);
  auto port = LocalPort(fd->get());
  if (!port.ok()) return port.status();
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(*fd), *port));
}

TcpListener::~TcpListener() { Stop(); }

int TcpListener::MaxConnections() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
    return kMaxConnections;
  }
  return static_cast<int>(std::min<rlim_t>(kMaxConnections, rl.rlim_cur / 4));
}

void TcpListener::Serve(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  thread_ = std::thread([this, acceptor] { AcceptLoop(acceptor); });
}

void TcpListener::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  fd_.reset();
}

int TcpListener::PruneAndCount(const std::string& address, int* from_address) {
  *from_address = 0;
  for (auto it = open_.begin(); it != open_.end();) {
    struct stat st {};
    if (::fstat(it->first, &st) != 0 || st.st_ino != it->second.inode) {
      it = open_.erase(it);
      continue;
    }
    *from_address += it->second.address == address ? 1 : 0;
    ++it;
  }
  return static_cast<int>(open_.size());
}

void TcpListener::AcceptLoop(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  while (!stopping_) {
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    const int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: wait rather than spin; the pending connection waits in the backlog.
      if (errno == EMFILE || errno == ENFILE) ::poll(nullptr, 0, 100);
      continue;
    }
    struct stat st {};
    auto address = PeerIp(fd);
    if (::fstat(fd, &st) != 0 || !address.ok()) {
      ::close(fd);
      continue;
    }
    int from_address = 0;
    const int open = PruneAndCount(*address, &from_address);
    const int most = MaxConnections();
    if (open >= most || from_address >= kMaxConnectionsPerAddress) {
      ::close(fd);
      ++refused_since_log_;
      if (absl::Now() - last_refusal_log_ > absl::Seconds(5)) {
        WSYNC_LOG(Warning, "closed ", refused_since_log_,
                  " TCP connection(s) at once, the last from ", *address, ": ",
                  open >= most ? absl::StrCat(open,
                                              " TCP connections are open, the most kept (a quarter "
                                              "of the descriptor limit, at most ",
                                              kMaxConnections, ")")
                               : absl::StrCat(*address, " has ", from_address,
                                              " open, the most kept from one address"));
        refused_since_log_ = 0;
        last_refusal_log_ = absl::Now();
      }
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    open_[fd] = Connection{st.st_ino, *address};
    // gRPC owns the descriptor from here, and closes it when the handshake fails or times out, or
    // the connection ends.
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
    params.listener_fd = fd_.get();
    params.fd = fd;
    acceptor->HandleNewConnection(&params);
  }
}

}  // namespace wsync
