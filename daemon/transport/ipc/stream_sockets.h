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
#include "daemon/transport/engine_process.h"

namespace wsync {

// One ZMQ REQ socket that wsyncd binds for one engine rank to connect to. Requests may be sent
// while a reply is still owed (ZMQ_REQ_RELAXED, with replies matched to their request), so an
// abort reaches a rank that is busy loading. Only the process its gate admits is connected to it
// (StreamPeerGate), so only that process takes its frames. Used by one thread at a time.
class StreamSocket {
 public:
  ~StreamSocket();  // closes it, keeping an unsent abort up to 1 s, and removes its file
  const std::string& address() const { return address_; }
  // Sends one frame unless the socket cannot take it now (no rank connected): false then.
  absl::StatusOr<bool> TrySend(const std::string& frame);
  // The next reply, if one has arrived; PermissionDenied if it came from another process than
  // the one admitted.
  absl::StatusOr<std::optional<std::string>> TryReceive();
  // What the gate refused, for an error about a rank that never connected ("" if nothing).
  std::string RefusalNote() const;
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

// The ZMQ context of one IPC transport's stream sockets, its ZAP handler (ZapHandler), and where
// their files live: a private subdirectory (mode 0711: engines can reach a socket by name but
// not list them) of a directory that wsyncd and the engines both see, such as a shared /tmp.
//
// A socket's name is no secret (/proc/net/unix lists every bound path), so who may take its
// frames is decided by its gate, from the connecting process's credentials, during the
// connection's handshake; the socket file admits only the engine's user where wsyncd can arrange
// that (see Bind). The first directory made also removes those of dead wsyncds.
class StreamSockets {
 public:
  explicit StreamSockets(std::string dir) : dir_(std::move(dir)) {}
  ~StreamSockets();
  StreamSockets(const StreamSockets&) = delete;
  StreamSockets& operator=(const StreamSockets&) = delete;

  // The local process serving the engine at `url` (EngineProcessFinder::Find).
  absl::StatusOr<EngineProcess> FindEngine(absl::string_view url);
  // A REQ socket bound to a fresh "ipc://" address, open to the workers of `engine` alone;
  // `label` names it in errors and logs.
  absl::StatusOr<std::unique_ptr<StreamSocket>> Bind(const EngineProcess& engine,
                                                     std::string label);

  struct Context;  // the ZMQ context, defined where ZMQ is included

 private:
  absl::Status EnsureLocked();

  const std::string dir_;
  EngineProcessFinder finder_;
  std::mutex mu_;
  std::shared_ptr<Context> context_;  // shared with the sockets, which outlive no transport
  std::string private_dir_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_STREAM_SOCKETS_H_
