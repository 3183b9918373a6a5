#include "daemon/service/unix_listener.h"

#include <fcntl.h>
#include <grp.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace wsync {
namespace {

// A socket file left by a crashed daemon blocks bind; one that still answers belongs to a live
// daemon and must not be taken over.
absl::Status PrepareSocketPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("another wsyncd is already serving ", path));
  }
  std::filesystem::remove(path, ec);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path,
                                                                   const std::string& group) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is too long"));
  }
  if (absl::Status s = PrepareSocketPath(path); !s.ok()) return s;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  // A private umask makes the file 0600 from the moment it exists; it is opened up below.
  const mode_t old_umask = ::umask(0177);
  const int bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind ", path, ": ", std::strerror(bind_errno)));
  }
  if (::listen(fd.get(), 128) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", path));
  }
  auto listener = std::unique_ptr<UnixListener>(new UnixListener(path, std::move(fd)));
  listener->mode_description_ = "0600";
  // A number is a gid as it is (containers often have no group database entry for it).
  std::optional<gid_t> gid;
  if (uint32_t number = 0; !group.empty() && absl::SimpleAtoi(group, &number)) {
    gid = static_cast<gid_t>(number);
  } else if (const struct group* g = group.empty() ? nullptr : ::getgrnam(group.c_str())) {
    gid = g->gr_gid;
  }
  if (gid.has_value()) {
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *gid) == 0 &&
        ::chmod(path.c_str(), 0660) == 0) {
      listener->mode_description_ = absl::StrCat("0660 group ", group);
    } else {
      WSYNC_LOG(Warning, "cannot give ", path, " to group ", group, " (", std::strerror(errno),
                "); it stays 0600");
    }
  }
  return listener;
}

UnixListener::~UnixListener() { Stop(); }

void UnixListener::Serve(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void UnixListener::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_.valid()) {
    fd_.reset();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
}

void UnixListener::AcceptLoop(grpc::Server* server) {
  while (!stopping_) {
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: wait rather than spin; the pending connection waits in the backlog.
      if (errno == EMFILE || errno == ENFILE) ::poll(nullptr, 0, 100);
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    struct stat st {};
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || ::fstat(fd, &st) != 0) {
      ::close(fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool limited = cred.uid != 0 && cred.uid != ::geteuid();
      if (limited && PruneAndCountLocked(cred.uid) >= kMaxConnectionsPerUser) {
        ::close(fd);
        if (absl::Now() - last_refusal_log_ > absl::Seconds(5)) {
          last_refusal_log_ = absl::Now();
          WSYNC_LOG(Warning, "refused a connection of uid ", cred.uid, " (pid ", cred.pid,
                    "): it holds ", kMaxConnectionsPerUser, " already");
        }
        continue;
      }
      peers_[fd] = UnixPeer{cred.uid, cred.gid, cred.pid, next_serial_++, st.st_ino};
    }
    // gRPC owns the descriptor from here and closes it when the connection ends; the entry is
    // replaced when the number is reused, before the new connection can make a call.
    grpc::AddInsecureChannelFromFd(server, fd);
  }
}

int UnixListener::PruneAndCountLocked(uid_t uid) {
  int count = 0;
  for (auto it = peers_.begin(); it != peers_.end();) {
    struct stat st {};
    if (::fstat(it->first, &st) != 0 || st.st_ino != it->second.inode) {
      it = peers_.erase(it);
      continue;
    }
    count += it->second.uid == uid ? 1 : 0;
    ++it;
  }
  return count;
}

std::optional<UnixPeer> UnixListener::PeerOf(const std::string& grpc_peer) const {
  absl::string_view rest = grpc_peer;
  int fd = -1;
  if (!absl::ConsumePrefix(&rest, "fd:") || !absl::SimpleAtoi(rest, &fd)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  // The number must still name the socket that was accepted: a closed descriptor, or one reused
  // for another file, identifies nobody.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_ino != it->second.inode) return std::nullopt;
  return it->second;
}

}  // namespace wsync
