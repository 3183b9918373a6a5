#ifndef WSYNC_DAEMON_SERVICE_UNIX_LISTENER_H_
#define WSYNC_DAEMON_SERVICE_UNIX_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net.h"

namespace grpc {
class Server;
}

namespace wsync {

// The kernel's word on who is at the other end of a unix connection (SO_PEERCRED).
struct UnixPeer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  uint64_t serial = 0;  // unique for the daemon's life, so a reused descriptor is a new connection
  ino_t inode = 0;      // the socket's inode: a descriptor number now naming another file is stale
};

// wsyncd's unix socket. gRPC's own unix listener does not tell a service who connected, so
// wsyncd accepts here, reads each connection's credentials, and hands the connection to the gRPC
// server; a call's peer ("fd:N") then names the credentials recorded for descriptor N.
//
// The socket file is mode 0660 with group `group` (a name, or a numeric gid) when that group
// exists (its members are the trainers allowed in), else 0600 (the daemon's user only).
class UnixListener {
 public:
  // Connections one non-admin user may hold open at once (a trainer process needs one or two),
  // so that one user cannot take every descriptor wsyncd has.
  static constexpr int kMaxConnectionsPerUser = 64;

  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path,
                                                              const std::string& group);
  ~UnixListener();

  // Starts handing accepted connections to `server` (started, and outliving Stop()).
  void Serve(grpc::Server* server);
  // Stops accepting and removes the socket file.
  void Stop();

  // The credentials of the connection behind a call's peer string, if it came from here.
  std::optional<UnixPeer> PeerOf(const std::string& grpc_peer) const;
  // What the socket file was made: "0600" or "0660 group wsync".
  const std::string& mode_description() const { return mode_description_; }

 private:
  UnixListener(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  void AcceptLoop(grpc::Server* server);
  // Drops entries whose descriptor was closed by gRPC (or now names another file); returns how
  // many live connections `uid` holds. Needs mu_.
  int PruneAndCountLocked(uid_t uid);

  const std::string path_;
  UniqueFd fd_;
  std::string mode_description_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, UnixPeer> peers_;  // by descriptor number
  absl::Time last_refusal_log_ = absl::InfinitePast();
  uint64_t next_serial_ = 1;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_UNIX_LISTENER_H_
