#include "daemon/transport/ipc/stream_peer_gate.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "daemon/core/peer_text.h"

namespace wsync {

absl::Status StreamPeerGate::Refuse(std::string why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
    last_refusal_ = why;
  }
  // A refused peer reconnects every 100 ms: the log's repeat window folds the same line.
  WSYNC_LOG(Warning, label_, ": refused a connection to its stream socket: ", why);
  return absl::PermissionDeniedError(why);
}

absl::Status StreamPeerGate::Admit(absl::string_view peer_address) {
  const std::optional<PeerCredentials> peer = ParsePeerAddress(peer_address);
  if (!peer.has_value()) {
    return Refuse(absl::StrCat("peer address '", SanitizePeerText(peer_address, 80),
                               "' carries no credentials (libzmq without SO_PEERCRED?)"));
  }
  const std::string who = absl::StrCat("pid ", peer->pid, " (uid ", peer->uid, ")");
  if (peer->pid == 0) {
    return Refuse(absl::StrCat(who,
                               " is outside wsyncd's PID namespace, so it cannot be told "
                               "from the engine's workers: run wsyncd in the engine's PID "
                               "namespace or a parent of it"));
  }
  if (peer->uid != engine_.uid) {
    return Refuse(
        absl::StrCat(who, " does not run as the engine's user (", engine_.Describe(), ")"));
  }
  if (!engine_.servers.empty() && !DescendsFrom(peer->pid, engine_.servers, proc_)) {
    return Refuse(absl::StrCat(who, " is not the engine's server process or a descendant of it (",
                               engine_.Describe(), ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (admitted_ != 0 && admitted_ != peer->pid) {
    ++refused_;
    last_refusal_ = absl::StrCat(who, ": pid ", admitted_, " already took this rank's socket");
    WSYNC_LOG(Warning, label_, ": refused a connection to its stream socket: ", last_refusal_);
    return absl::PermissionDeniedError(last_refusal_);
  }
  admitted_ = peer->pid;
  return absl::OkStatus();
}

absl::Status StreamPeerGate::CheckReply(absl::string_view peer_address) const {
  const std::optional<PeerCredentials> peer = ParsePeerAddress(peer_address);
  std::lock_guard<std::mutex> lock(mu_);
  if (peer.has_value() && admitted_ != 0 && peer->pid == admitted_) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("a reply came from '", SanitizePeerText(peer_address, 80), "', not from pid ",
                   admitted_, ", the process admitted to this rank's socket"));
}

std::string StreamPeerGate::RefusalNote() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (refused_ == 0) return "";
  return absl::StrCat(" (it refused ", refused_, " connection(s), the last: ", last_refusal_, ")");
}

}  // namespace wsync
