#ifndef WSYNC_COMMON_NET_H_
#define WSYNC_COMMON_NET_H_

#include <sys/uio.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace wsync {

// Owns a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Listens on bind_address:port (port 0 picks a free one), with SO_REUSEADDR.
absl::StatusOr<UniqueFd> ListenTcp(const std::string& bind_address, uint16_t port);
absl::StatusOr<uint16_t> LocalPort(int fd);
// Connects, retrying refused connections until the deadline (peers may not listen yet).
absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, uint16_t port, absl::Time deadline);
// Sets TCP_NODELAY and large socket buffers for bulk transfers.
void TuneSocket(int fd);

// Full-length I/O on a socket that gives up at the deadline. ReadExact returns
// UnavailableError("peer closed") on EOF.
absl::Status WriteAll(int fd, const void* data, size_t bytes, absl::Time deadline);
absl::Status ReadExact(int fd, void* data, size_t bytes, absl::Time deadline);
// ReadExact into several buffers in order: the stream's next bytes fill pieces[0], then
// pieces[1], and so on, with no staging copy in between.
absl::Status ReadExactV(int fd, std::vector<iovec> pieces, absl::Time deadline);

// Splits "host:port" (with [v6]:port allowed).
absl::StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address);

// The numeric IP address of a connected socket's peer ("10.0.0.7", "::1"); an IPv4 peer of an
// IPv6 socket is given in its IPv4 form, as IpAddress::ToString writes it.
absl::StatusOr<std::string> PeerIp(int fd);

// Both ends of a connected TCP socket, each IP in PeerIp's form.
struct SocketEnds {
  std::string local_ip;
  uint16_t local_port = 0;
  std::string peer_ip;
  uint16_t peer_port = 0;
};
absl::StatusOr<SocketEnds> SocketEndsOf(int fd);

}  // namespace wsync

#endif  // WSYNC_COMMON_NET_H_
