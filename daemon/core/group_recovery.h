#ifndef WSYNC_DAEMON_CORE_GROUP_RECOVERY_H_
#define WSYNC_DAEMON_CORE_GROUP_RECOVERY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/group_record.h"

namespace wsync {

// What a group carries over from the wsyncd that ran before this one, and what it records for the
// one after: the engine groups earlier incarnations made (engines may still hold them, and refuse
// to join another until they drop them or restart), the engines that failed to join since, and
// the port of the last rendezvous store, which the next store avoids.
// Not thread-safe: the group's lock guards it.
class GroupRecovery {
 public:
  // Asks the engines of the earlier group (in its record's spec order) to drop the engine group
  // `name`; one result per engine.
  using LeaveStale = std::function<std::vector<absl::Status>(const std::string& name)>;

  explicit GroupRecovery(std::string group) : group_(std::move(group)) {}

  // Takes what an earlier wsyncd's record says of this group. Returns, for the engines among
  // `current` (URLs), why each waits for a full version; the others are logged, to be resumed by
  // hand. Records the engine groups the engines are to drop before this group forms.
  std::map<std::string, std::string> TakeOver(const GroupRecord& previous,
                                              const std::set<std::string>& current);
  // The names the engines are to drop; empty when there are none.
  const std::vector<std::string>& stale_engine_groups() const { return stale_engine_groups_; }
  // Those names as logs show them (their secret tokens hidden), joined by "', '".
  std::string ShownStaleGroups() const;
  // How to ask the earlier engines (`urls`, in the order LeaveStale answers) to drop them.
  void SetStaleEngines(std::vector<std::string> urls, LeaveStale leave);
  // Before every formation until one with every engine succeeds: asks the earlier engines to drop
  // the earlier groups, and notes those that cannot.
  void LeaveStaleGroups();

  // True while no formation with every engine succeeded since the earlier record was taken over:
  // an engine that fails to join may still hold the earlier group.
  bool after_restart() const { return after_restart_; }
  // Marks an engine that failed to join after a restart as needing a restart of its own.
  void NeedsRestart(const std::string& url);
  // The notes a failed formation carries: for each engine in `failed` (those that failed to join
  // after a restart) why it needs a restart (the `joined` ones no longer do); with no `failed`,
  // every engine's note that it cannot drop an earlier group.
  std::vector<std::string> FormationNotes(const std::vector<std::string>& failed,
                                          const std::vector<std::string>& joined);
  // A formation succeeded over the engines `joined` (all of them when `everyone`). Returns
  // whether the record changed (the earlier groups are forgotten, or the store's port moved).
  bool Formed(const std::vector<std::string>& joined, bool everyone, uint16_t store_port);
  // Engine URL -> why it needs a restart before it can join.
  const std::map<std::string, std::string>& needs_restart() const { return needs_restart_; }

  // The store ports the group's next store must not take.
  std::vector<uint16_t> AvoidStorePorts() const;
  // Writes what recovery keeps into `record`.
  void Fill(GroupRecord* record) const;

 private:
  std::string RestartNote(const std::string& url) const;

  const std::string group_;
  // The names earlier incarnations gave the group, as recorded; until a formation with every
  // engine succeeds (then cleared) the engines are asked to drop them before every formation.
  std::vector<std::string> stale_engine_groups_;
  std::vector<std::string> stale_urls_;
  LeaveStale leave_;
  // Engine URL -> why it may still hold an earlier group (it cannot drop one); named in
  // formation errors until a formation succeeds.
  std::map<std::string, std::string> stale_notes_;
  bool after_restart_ = false;
  // Engine URL -> why it needs a restart; cleared by a formation it joins.
  std::map<std::string, std::string> needs_restart_;
  // The store port the earlier incarnation recorded, and the port of the last store the engines
  // were sent to (recorded so the next incarnation avoids it).
  uint16_t earlier_store_port_ = 0;
  uint16_t store_port_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_GROUP_RECOVERY_H_
