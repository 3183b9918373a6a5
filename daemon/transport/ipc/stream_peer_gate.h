#ifndef WSYNC_DAEMON_TRANSPORT_IPC_STREAM_PEER_GATE_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_STREAM_PEER_GATE_H_

#include <sys/types.h>

#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/transport/engine_process.h"

namespace wsync {

// Who may take one rank socket's frames. A connecting process is admitted when
//   - it is in wsyncd's PID namespace (its pid is known: the rules below need it),
//   - it runs as the engine's user (the owner of the engine's listening socket),
//   - it is, or descends from, a process serving the engine's port, where wsyncd sees those
//     (SGLang's scheduler processes, which run the ranks' workers, are its children), and
//   - no other process was admitted on this socket: one rank, one process; the admitted one may
//     reconnect.
// The socket's ZAP handler asks during each connection's handshake, before the socket routes
// any message to it, and every reply is checked to come from the admitted process.
class StreamPeerGate {
 public:
  // `label` names the socket in errors and logs ("engine http://... TP rank 0").
  StreamPeerGate(std::string label, EngineProcess engine, std::string proc = "/proc")
      : label_(std::move(label)), engine_(std::move(engine)), proc_(std::move(proc)) {}

  // OK admits; otherwise PermissionDenied saying why (also kept for RefusalNote).
  absl::Status Admit(absl::string_view peer_address);
  // OK when a reply's Peer-Address is the admitted process's.
  absl::Status CheckReply(absl::string_view peer_address) const;
  // "" when nothing was refused; else " (refused N connection(s), the last: <why>)", for an
  // error about a rank that never connected.
  std::string RefusalNote() const;
  const std::string& label() const { return label_; }

 private:
  absl::Status Refuse(std::string why);

  const std::string label_;
  const EngineProcess engine_;
  const std::string proc_;
  mutable std::mutex mu_;
  pid_t admitted_ = 0;  // 0: none yet
  int refused_ = 0;
  std::string last_refusal_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_STREAM_PEER_GATE_H_
