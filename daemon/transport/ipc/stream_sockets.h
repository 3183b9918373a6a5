#ifndef WSYNC_DAEMON_TRANSPORT_IPC_STREAM_SOCKETS_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_STREAM_SOCKETS_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace wsync {

// One ZMQ REQ socket that wsyncd binds for one engine rank to connect to. Requests may be sent
// while a reply is still owed (ZMQ_REQ_RELAXED, with replies matched to their request), so an
// abort reaches a rank that is busy loading. Used by one thread at a time.
class StreamSocket {
 public:
  ~StreamSocket();  // closes it, keeping an unsent abort up to 1 s, and removes its file
  const std::string& address() const { return address_; }
  // Sends one frame unless the socket cannot take it now (no rank connected): false then.
  absl::StatusOr<bool> TrySend(const std::string& frame);
  // The next reply, if one has arrived.
  absl::StatusOr<std::optional<std::string>> TryReceive();
  // Waits up to `timeout` for any of `sockets` to have a reply (or, with `writable`, to take a
  // frame); ready[i] says which.
  static absl::Status Poll(const std::vector<StreamSocket*>& sockets, bool writable,
                           absl::Duration timeout, std::vector<bool>* ready);

 private:
  friend class StreamSockets;
  struct Impl;
  StreamSocket(std::unique_ptr<Impl> impl, std::string address, std::string path);
  std::unique_ptr<Impl> impl_;
  std::string address_;
  std::string path_;
};

// The ZMQ context of one IPC transport's stream sockets, and where their files live: a private
// subdirectory (mode 0711: engines can reach a socket by name but not list them) of a directory
// that wsyncd and the engines both see, such as a shared /tmp. Socket names carry 64 random bits,
// and the sockets are open to any user (an engine may run as another), so reaching one takes its
// name, which only the engine's request carries. The first directory made also removes those of
// dead wsyncds.
class StreamSockets {
 public:
  explicit StreamSockets(std::string dir) : dir_(std::move(dir)) {}
  ~StreamSockets();
  StreamSockets(const StreamSockets&) = delete;
  StreamSockets& operator=(const StreamSockets&) = delete;

  // A REQ socket bound to a fresh "ipc://" address.
  absl::StatusOr<std::unique_ptr<StreamSocket>> Bind();

  struct Context;  // the ZMQ context, defined where ZMQ is included

 private:
  absl::Status EnsureLocked();

  const std::string dir_;
  std::mutex mu_;
  std::shared_ptr<Context> context_;  // shared with the sockets, which outlive no transport
  std::string private_dir_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_STREAM_SOCKETS_H_
