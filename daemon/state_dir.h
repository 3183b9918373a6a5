#ifndef WSYNC_DAEMON_STATE_DIR_H_
#define WSYNC_DAEMON_STATE_DIR_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net.h"
#include "daemon/core/group_record.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The group records of one wsyncd in a directory (--state-dir): one JSON file per group,
// groups/<name>.json, each replaced whole (written to a temporary file, fsynced, renamed over
// the old one, directory fsynced), so a crash at any moment leaves either the old record or the
// new one. A lock file keeps a second wsyncd off the same directory: two daemons would each
// destroy the other's groups at the engines.
class StateDir final : public GroupStateStore {
 public:
  // Creates `path` (mode 0700) if it is missing and takes its lock.
  static absl::StatusOr<std::unique_ptr<StateDir>> Open(const std::string& path);

  // Every record in the directory. A file that cannot be read is named in `problems` and left
  // where it is, for the operator.
  std::vector<GroupRecord> LoadAll(std::vector<std::string>* problems) const;

  absl::Status Save(const GroupRecord& record) override;
  absl::Status Remove(const std::string& group) override;

  const std::string& path() const { return path_; }

  // The record as a file holds it, and back.
  static nlohmann::json RecordToJson(const GroupRecord& record);
  static absl::StatusOr<GroupRecord> RecordFromJson(const nlohmann::json& json);

 private:
  StateDir(std::string path, UniqueFd lock) : path_(std::move(path)), lock_(std::move(lock)) {}
  std::string FileOf(const std::string& group) const;

  const std::string path_;
  const UniqueFd lock_;  // flock held for the life of this object
  std::mutex mu_;        // one write at a time: they share the directory's fsync
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_STATE_DIR_H_
