#include "daemon/transport/ipc/stream_sockets.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/transport/ipc/socket_dirs.h"
#include "daemon/transport/ipc/stream_peer_gate.h"
#include "daemon/transport/ipc/zap_handler.h"

namespace wsync {

struct StreamSockets::Context {
  zmq::context_t zmq;
  // Declared after the context: bound before any stream socket, closed after every one.
  ZapHandler zap{zmq};
};

struct StreamSocket::Impl {
  std::shared_ptr<StreamSockets::Context> context;  // outlives the socket
  zmq::socket_t socket;
  std::string domain;  // the socket's ZAP domain
  std::shared_ptr<StreamPeerGate> gate;
};

namespace {

absl::Status ZmqError(absl::string_view what, const zmq::error_t& e) {
  return absl::UnavailableError(absl::StrCat("zmq ", what, ": ", e.what()));
}

}  // namespace

StreamSocket::StreamSocket(std::unique_ptr<Impl> impl, std::string address, std::string path)
    : impl_(std::move(impl)), address_(std::move(address)), path_(std::move(path)) {}

StreamSocket::~StreamSocket() {
  // A frame still queued (an abort) goes out in the context's I/O thread within the linger.
  impl_->socket.close();
  impl_->context->zap.Unregister(impl_->domain);
  ::unlink(path_.c_str());
}

std::string StreamSocket::RefusalNote() const { return impl_->gate->RefusalNote(); }

absl::StatusOr<bool> StreamSocket::TrySend(const std::string& frame) {
  try {
    return impl_->socket.send(zmq::buffer(frame), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    return ZmqError("send", e);
  }
}

absl::StatusOr<std::optional<std::string>> StreamSocket::TryReceive() {
  try {
    zmq::message_t message;
    if (!impl_->socket.recv(message, zmq::recv_flags::dontwait).has_value()) return std::nullopt;
    // Each connection was admitted by the gate; this holds every reply to the admitted process.
    const char* peer = zmq_msg_gets(message.handle(), "Peer-Address");
    if (absl::Status s = impl_->gate->CheckReply(peer == nullptr ? "" : peer); !s.ok()) return s;
    return std::optional<std::string>(message.to_string());
  } catch (const zmq::error_t& e) {
    return ZmqError("receive", e);
  }
}

absl::Status StreamSocket::Poll(const std::vector<StreamSocket*>& sockets, bool writable,
                                absl::Duration timeout, std::vector<bool>* ready) {
  std::vector<zmq::pollitem_t> items;
  for (StreamSocket* s : sockets) {
    items.push_back(zmq::pollitem_t{s->impl_->socket.handle(), 0,
                                    static_cast<short>(writable ? ZMQ_POLLOUT : ZMQ_POLLIN), 0});
  }
  ready->assign(sockets.size(), false);
  try {
    zmq::poll(items.data(), items.size(),
              std::chrono::milliseconds(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout))));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return absl::OkStatus();
    return ZmqError("poll", e);
  }
  for (size_t i = 0; i < items.size(); ++i) (*ready)[i] = items[i].revents != 0;
  return absl::OkStatus();
}

StreamSockets::~StreamSockets() {
  // The sockets, each holding the context, are gone with their streams by now.
  if (!private_dir_.empty()) ::rmdir(private_dir_.c_str());
}

absl::StatusOr<EngineProcess> StreamSockets::FindEngine(absl::string_view url) {
  auto engine = finder_.Find(url);
  if (engine.ok() || !absl::IsFailedPrecondition(engine.status())) return engine;
  return absl::FailedPreconditionError(absl::StrCat(
      engine.status().message(),
      "; the map-once route lets only the workers of the process serving the engine's port take "
      "its frames: run wsyncd on the engine's host in its network namespace, or use the group's "
      "tensor route"));
}

absl::Status StreamSockets::EnsureLocked() {
  if (!context_) {
    // Engines resolve the address in their own working directory: it must be absolute.
    std::error_code ec;
    const std::filesystem::path base =
        std::filesystem::absolute(std::filesystem::path(dir_.empty() ? "/tmp" : dir_), ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine stream socket directory ", dir_, ": ", ec.message()));
    }
    const std::string normal = base.lexically_normal().string();
    // A wsyncd that died left its directory, with its sockets' files, behind.
    const std::vector<std::string> removed = RemoveDeadSocketDirs(normal);
    if (!removed.empty()) {
      WSYNC_LOG(Info, "removed ", removed.size(), " stream socket directories of wsyncds that are ",
                "gone from ", normal, ": ", absl::StrJoin(removed, ", "));
    }
    try {
      context_ = std::make_shared<Context>();
    } catch (const zmq::error_t& e) {
      return ZmqError("context", e);
    }
    private_dir_ = absl::StrCat(normal, "/", NewSocketDirName());
  }
  struct stat st {};
  if (::lstat(private_dir_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return absl::OkStatus();
  // Made on the first bind, and again if something removed it since.
  if (::mkdir(private_dir_.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot make the directory for engine stream sockets ", private_dir_, ": ",
        std::strerror(errno),
        " (set ipc_socket_dir to a directory wsyncd can write and the engines can reach)"));
  }
  // Reachable by name, not listable: chmod, since mkdir's mode is cut by the umask.
  ::chmod(private_dir_.c_str(), 0711);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StreamSocket>> StreamSockets::Bind(const EngineProcess& engine,
                                                                  std::string label) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = EnsureLocked(); !s.ok()) return s;
  const std::string name = NewSocketFileName();
  const std::string path = absl::StrCat(private_dir_, "/", name);
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine stream socket path ", path, " is longer than a unix socket allows (",
                     sizeof(sockaddr_un::sun_path) - 1, " bytes): set a shorter ipc_socket_dir"));
  }
  auto gate = std::make_shared<StreamPeerGate>(std::move(label), engine);
  auto impl = std::make_unique<StreamSocket::Impl>(StreamSocket::Impl{
      context_, zmq::socket_t(context_->zmq, zmq::socket_type::req), name, gate});
  const std::string address = absl::StrCat("ipc://", path);
  // Registered before the socket can take a connection: the handler refuses unknown domains.
  context_->zap.Register(name, gate);
  try {
    impl->socket.set(zmq::sockopt::linger, 1000);
    impl->socket.set(zmq::sockopt::req_relaxed, 1);
    impl->socket.set(zmq::sockopt::req_correlate, 1);
    // A rank's answer is empty or a traceback: a larger one drops that rank's connection rather
    // than being held in wsyncd's memory (the bucket then fails at its deadline).
    impl->socket.set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
    // With a domain, every connection goes through the ZAP handler before the socket may route
    // a message to it.
    impl->socket.set(zmq::sockopt::zap_domain, name);
    impl->socket.bind(address);
  } catch (const zmq::error_t& e) {
    context_->zap.Unregister(name);
    return ZmqError(absl::StrCat("bind ", address), e);
  }
  // Connecting takes write permission on the socket's file. Only the engine's user gets it
  // where wsyncd can arrange that: the engine runs as wsyncd's user, or wsyncd is root and gives
  // the file to the engine's user. Otherwise (an engine of another user, wsyncd not root) every
  // user may connect, and the gate alone admits the engine's workers.
  const uid_t self = ::geteuid();
  const bool engines_only =
      engine.uid == self ||
      (self == 0 && ::chown(path.c_str(), engine.uid, static_cast<gid_t>(-1)) == 0);
  ::chmod(path.c_str(), engines_only ? 0600 : 0666);
  return std::unique_ptr<StreamSocket>(new StreamSocket(std::move(impl), address, path));
}

}  // namespace wsync
