#include "daemon/core/group_recovery.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/core/engine_group_name.h"

namespace wsync {
std::map<std::string, std::string> GroupRecovery::TakeOver(const GroupRecord& previous,
                                                           const std::set<std::string>& current) {
  earlier_store_port_ = previous.store_port;
  store_port_ = previous.store_port;
  // Engines the earlier wsyncd left paused mid-update, or still waiting for a full version, wait
  // on: they may hold tensors of two versions under the older one's label.
  std::map<std::string, std::string> waiting = previous.needs_full_version;
  if (!previous.open_version.empty()) {
    const std::string earlier = previous.last_version.empty()
                                    ? std::string("its earlier weights")
                                    : absl::StrCat("'", previous.last_version, "'");
    for (const EngineSpec& e : previous.spec.engines) {
      waiting.emplace(e.url, absl::StrCat("wsyncd stopped during update ", previous.open_update_id,
                                          " to version '", previous.open_version,
                                          "': the engine may hold tensors of '",
                                          previous.open_version, "' and of ", earlier));
    }
  }
  std::map<std::string, std::string> needs_full;
  for (auto& [url, why] : waiting) {
    if (current.count(url) != 0) {
      WSYNC_LOG(Warning, "group ", group_, ": engine ", url, " needs a full version: ", why);
      needs_full[url] = why;
    } else {
      WSYNC_LOG(Warning, "group ", group_, ": engine ", url,
                " is no longer one of its engines but was left paused (", why,
                "); resume its generation by hand through its engine's resume route");
    }
  }
  std::vector<std::string> names = previous.stale_engine_groups;
  if (!previous.engine_group.empty()) names.push_back(previous.engine_group);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (!names.empty()) {
    after_restart_ = true;
    stale_engine_groups_ = std::move(names);
  }
  return needs_full;
}

void GroupRecovery::SetStaleEngines(std::vector<std::string> urls, LeaveStale leave) {
  stale_urls_ = std::move(urls);
  leave_ = std::move(leave);
}

void GroupRecovery::LeaveStaleGroups() {
  if (!leave_) return;
  // Asked before every formation until one succeeds: an engine down now is asked again.
  for (const std::string& name : stale_engine_groups_) {
    const std::vector<absl::Status> results = leave_(name);
    const std::string shown = ShownEngineGroup(name);
    for (size_t i = 0; i < results.size() && i < stale_urls_.size(); ++i) {
      const std::string& url = stale_urls_[i];
      if (results[i].ok()) {
        WSYNC_LOG(Info, "group ", group_, ": engine ", url, " dropped the group '", shown,
                  "' an earlier wsyncd left");
      } else if (results[i].code() == absl::StatusCode::kUnimplemented) {
        stale_notes_[url] = absl::StrCat(
            "engine ", url, " has no route to drop the group '", shown,
            "' an earlier wsyncd left; if it still holds it, it refuses to join: restart it");
        WSYNC_LOG(Warning, "group ", group_, ": ", stale_notes_[url]);
      } else {
        // Most often the engine held no such group (it restarted too, or dropped it at an
        // earlier try), or is down.
        WSYNC_LOG(Info, "group ", group_, ": engine ", url, ": dropping the group '", shown,
                  "' an earlier wsyncd left: ", RedactEngineGroupTokens(results[i].message()));
      }
    }
  }
}

std::string GroupRecovery::ShownStaleGroups() const {
  std::vector<std::string> shown;
  for (const std::string& n : stale_engine_groups_) shown.push_back(ShownEngineGroup(n));
  return absl::StrJoin(shown, "', '");
}

std::string GroupRecovery::RestartNote(const std::string& url) const {
  return absl::StrCat("engine ", url,
                      " failed to join after wsyncd restarted and may still hold the group '",
                      ShownStaleGroups(), "' an earlier wsyncd made: restart it");
}

void GroupRecovery::NeedsRestart(const std::string& url) {
  if (after_restart_) needs_restart_[url] = RestartNote(url);
}

std::vector<std::string> GroupRecovery::FormationNotes(const std::vector<std::string>& failed,
                                                       const std::vector<std::string>& joined) {
  std::vector<std::string> notes;
  if (failed.empty()) {
    for (const auto& [url, note] : stale_notes_) notes.push_back(note);
    return notes;
  }
  // The earlier wsyncd's group may still be held where an engine failed to join: by name, each
  // of those engines needs a restart (the rest joined, so they hold nothing stale).
  for (const std::string& url : joined) needs_restart_.erase(url);
  for (const std::string& url : failed) {
    auto noted = stale_notes_.find(url);
    needs_restart_[url] = noted != stale_notes_.end() ? noted->second : RestartNote(url);
    notes.push_back(needs_restart_[url]);
  }
  return notes;
}

bool GroupRecovery::Formed(const std::vector<std::string>& joined, bool everyone,
                           uint16_t store_port) {
  stale_notes_.clear();
  for (const std::string& url : joined) needs_restart_.erase(url);
  // Every engine joined this incarnation's group: none holds an earlier one any more. (An engine
  // a quorum group formed without is asked to drop them again before the next formation.)
  bool changed = false;
  if (everyone) {
    after_restart_ = false;
    changed = !stale_engine_groups_.empty();
    stale_engine_groups_.clear();
    stale_urls_.clear();
    leave_ = nullptr;
  }
  if (store_port != 0 && store_port != store_port_) {
    store_port_ = store_port;
    changed = true;
  }
  return changed;
}

std::vector<uint16_t> GroupRecovery::AvoidStorePorts() const {
  std::vector<uint16_t> ports;
  if (earlier_store_port_ != 0) ports.push_back(earlier_store_port_);
  // A store made again for the same group never takes the port engines were last sent to.
  if (store_port_ != 0 && store_port_ != earlier_store_port_) ports.push_back(store_port_);
  return ports;
}

void GroupRecovery::Fill(GroupRecord* record) const {
  record->stale_engine_groups = stale_engine_groups_;
  record->store_port = store_port_;
}

}  // namespace wsync
