#ifndef WSYNC_DAEMON_SERVICE_SESSION_OWNERS_H_
#define WSYNC_DAEMON_SERVICE_SESSION_OWNERS_H_

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/service/caller.h"

namespace wsync {

// Which connection opened each session. A session is used (pushed into, kept alive, given
// sources, closed) only over that connection; an admin may also close it. A trainer whose
// connection drops loses its session anyway (HoldSession ends it), so nothing legitimate needs
// another connection.
class SessionOwners {
 public:
  // Records the opener, first forgetting sessions that `open_ids` (the core's sessions now,
  // asked under this object's lock so that no concurrent Record is lost) no longer has.
  void Record(const std::string& session_id, const Caller& opener,
              const std::function<std::vector<std::string>()>& open_ids);
  // OK when `caller` may use the session: its opener's connection, or an admin when
  // `admin_may` is set. An unknown session is let through: the core answers NOT_FOUND for it.
  absl::Status Check(const std::string& session_id, const Caller& caller, bool admin_may) const;
  void Forget(const std::string& session_id);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> owners_;  // session id -> connection
};

// Sessions with a HoldSession call running: at most one each.
class HeldSessions {
 public:
  bool Claim(const std::string& session_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.insert(session_id).second;
  }
  void Release(const std::string& session_id) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.erase(session_id);
  }

 private:
  std::mutex mu_;
  std::set<std::string> held_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_SESSION_OWNERS_H_
