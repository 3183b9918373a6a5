#ifndef WSYNC_DAEMON_SERVICE_TCP_LISTENER_H_
#define WSYNC_DAEMON_SERVICE_TCP_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net.h"

namespace grpc::experimental {
class ExternalConnectionAcceptor;
}

namespace wsync {

// wsyncd's TCP listener (--listen). gRPC's own TCP listener takes every connection until the
// descriptors run out, and a connection costs one from its accept until its TLS handshake ends
// or times out; once they run out, the unix socket stops answering too. So wsyncd accepts here,
// keeps at most kMaxConnections TCP connections open (and a quarter of the descriptor limit at
// most) and kMaxConnectionsPerAddress from one address, closes the others at once, and hands
// the connections it keeps to the gRPC server, which runs their TLS handshake (bounded in time
// by the server's handshake timeout).
class TcpListener {
 public:
  static constexpr int kMaxConnections = 512;
  static constexpr int kMaxConnectionsPerAddress = 64;

  // Listens on "host:port" (port 0 picks one).
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(const std::string& address);
  ~TcpListener();

  // Starts handing accepted connections to `acceptor` (of a started server, outliving Stop()).
  void Serve(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // Stops accepting and closes the listening socket; connections already handed on stay.
  void Stop();

  int port() const { return port_; }
  // The most TCP connections kept open now: kMaxConnections, or a quarter of RLIMIT_NOFILE.
  static int MaxConnections();

 private:
  struct Connection {
    ino_t inode = 0;  // a descriptor number now naming another file was closed by gRPC
    std::string address;
  };
  TcpListener(UniqueFd fd, int port) : fd_(std::move(fd)), port_(port) {}
  void AcceptLoop(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // Drops connections gRPC has closed; returns how many are open, and how many from `address`.
  int PruneAndCount(const std::string& address, int* from_address);

  UniqueFd fd_;
  const int port_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::map<int, Connection> open_;  // by descriptor number; the accept thread's alone
  absl::Time last_refusal_log_ = absl::InfinitePast();
  int refused_since_log_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_TCP_LISTENER_H_
