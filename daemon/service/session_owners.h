#ifndef WSYNC_DAEMON_SERVICE_SESSION_OWNERS_H_
#define WSYNC_DAEMON_SERVICE_SESSION_OWNERS_H_

#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "daemon/service/caller.h"

namespace wsync {

// Which connection opened each session. A session is used (pushed into, kept alive, given
// sources, closed) only over that connection; an admin may also close it. A trainer whose
// connection drops loses its session anyway (HoldSession ends it), so nothing legitimate needs
// another connection.
class SessionOwners {
 public:
  void Record(const std::string& session_id, const Caller& opener);
  // OK when `caller` may use the session: its opener's connection, or an admin when
  // `admin_may` is set. An unknown session is let through: the core answers NOT_FOUND for it.
  absl::Status Check(const std::string& session_id, const Caller& caller, bool admin_may) const;
  void Forget(const std::string& session_id);
  // Keeps only the sessions `alive` says exist (sessions the core ended on its own).
  template <typename Pred>
  void Prune(Pred alive) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = owners_.begin(); it != owners_.end();) {
      it = alive(it->first) ? std::next(it) : owners_.erase(it);
    }
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> owners_;  // session id -> connection
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_SESSION_OWNERS_H_
