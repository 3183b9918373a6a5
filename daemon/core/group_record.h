#ifndef WSYNC_DAEMON_CORE_GROUP_RECORD_H_
#define WSYNC_DAEMON_CORE_GROUP_RECORD_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// What wsyncd keeps of a group outside its memory (--state-dir), so that the wsyncd that starts
// after one died can clean up after it: the engines still hold the weight-update group it made
// (and refuse to init another of that name), and an update it left open left their generation
// paused on a mix of two versions.
struct GroupRecord {
  GroupSpec spec;
  // The weight-update group name the engines were asked to init; they may hold it until asked to
  // destroy it. Each wsyncd incarnation names its groups afresh (the group's name and the
  // incarnation's id), so an engine that still holds this one never meets its name again.
  std::string engine_group;
  // Names earlier incarnations gave the group that engines may still hold: kept, and asked to be
  // dropped before every formation, until one succeeds (an engine down at the first try is asked
  // again, also by the incarnation after the next crash).
  std::vector<std::string> stale_engine_groups;
  // The port of the group's last rendezvous store (0: none yet). The next incarnation's store
  // avoids it: an engine rank still retrying the old store must not reach the new one.
  uint16_t store_port = 0;
  // The update open at the engines (generation paused for it) when this was written; empty when
  // none. Written before the engines are paused, so a record never says less than the engines
  // hold.
  std::string open_update_id;
  std::string open_version;
  // The version of the last update that completed.
  std::string last_version;
  // Engine URL -> why it holds (or may hold) a mix of two versions. Such an engine is not resumed
  // until a complete update lands or an operator resumes it.
  std::map<std::string, std::string> needs_full_version;
  // Declared by a trainer's session (Trainer.DeclareGroup), not by the config or an operator: the
  // next wsyncd keeps it for the first session that declares it again.
  bool trainer_declared = false;

  bool operator==(const GroupRecord&) const = default;
};

// Where group records are kept. Save returns once the record is durable (it survives a crash of
// wsyncd or of the machine), so a caller may act on the engines after it. Thread-safe.
class GroupStateStore {
 public:
  virtual ~GroupStateStore() = default;
  // Replaces the group's record.
  virtual absl::Status Save(const GroupRecord& record) = 0;
  // Forgets the group (it was destroyed: its engines were asked to drop it).
  virtual absl::Status Remove(const std::string& group) = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_GROUP_RECORD_H_
