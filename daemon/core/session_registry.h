#ifndef WSYNC_DAEMON_CORE_SESSION_REGISTRY_H_
#define WSYNC_DAEMON_CORE_SESSION_REGISTRY_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"

namespace wsync {

struct Session {
  std::string id;
  // Names the session's pull-mode sources (host mode: /wsync-<pid>-src-<tag>-<n>). Not the id:
  // shared-memory names are visible to every user of the host, and the id is what the session's
  // calls carry.
  std::string source_tag;
  int device = 0;
  std::string client_name;
  std::vector<SlotMemory*> slots;
  absl::Time last_seen;
  bool update_running = false;
};

// Trainer sessions and their leases. A session that neither calls KeepAlive nor runs an update
// for a lease period expires, and its slots go back to the pool.
class SessionRegistry {
 public:
  explicit SessionRegistry(absl::Duration lease) : lease_(lease) {}

  std::string NewId();
  // A fresh random source tag (32 bits would collide among a few ten thousand sessions; 64 do not).
  static std::string NewSourceTag();
  void Add(const std::string& id, std::string source_tag, int device, std::string client_name,
           std::vector<SlotMemory*> slots);
  absl::StatusOr<Session> Touch(const std::string& id);
  absl::StatusOr<Session> Remove(const std::string& id);
  // Marks an update as running; only one per session.
  absl::Status StartUpdate(const std::string& id);
  void EndUpdate(const std::string& id);
  std::vector<Session> Expire(absl::Time now);
  std::vector<Session> List() const;
  absl::Duration lease() const { return lease_; }

 private:
  const absl::Duration lease_;
  mutable std::mutex mu_;
  std::map<std::string, Session> sessions_;
  uint64_t next_ = 1;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_SESSION_REGISTRY_H_
