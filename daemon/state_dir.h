#ifndef WSYNC_DAEMON_STATE_DIR_H_
#define WSYNC_DAEMON_STATE_DIR_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net.h"
#include "daemon/core/group_record.h"
#include "nlohmann/json.hpp"

namespace wsync {

// What chooses the state directory when none is configured.
struct StateDirEnvironment {
  std::string state_directory;  // $STATE_DIRECTORY: systemd's StateDirectory=
  std::string xdg_state_home;   // $XDG_STATE_HOME
  std::string home;             // $HOME, else the user's home in the password database
  bool root = false;            // effective uid 0

  static StateDirEnvironment OfThisProcess();
};

// The state directory wsyncd uses when none is configured, and where it came from (for the log).
struct DefaultStateDir {
  std::string path;
  std::string source;
};

// The first that applies: $STATE_DIRECTORY (its first entry; systemd lists one per
// StateDirectory=), $XDG_STATE_HOME/wsync, /var/lib/wsync for root (where the systemd unit and
// the Kubernetes manifest keep it too, so a root wsyncd started by hand and the service's share
// the directory and its lock), $HOME/.local/state/wsync. Relative paths are ignored, as the XDG
// base directory specification says. An error when none applies.
absl::StatusOr<DefaultStateDir> ChooseDefaultStateDir(const StateDirEnvironment& env);

// The group records of one wsyncd in a directory (--state-dir): one JSON file per group,
// groups/<name>.json, each replaced whole (written to a temporary file, fsynced, renamed over
// the old one, directory fsynced), so a crash at any moment leaves either the old record or the
// new one. A lock file (flock on DIR/lock, which holds the holder's pid) keeps a second wsyncd off
// the same directory: two daemons would each destroy the other's groups at the engines.
class StateDir final : public GroupStateStore {
 public:
  // Creates `path` if it is missing, makes it 0700 (records name the engines and their groups)
  // and takes its lock, writing this process's pid into the lock file. A directory in use is
  // refused naming the holder's pid.
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

// What wsyncd starts with: the state directory `configured` names (absent: the default,
// ChooseDefaultStateDir's) opened, and its records; no directory and no records for '' (run
// without one). Logs where the directory is and why, and each record it cannot read.
struct OpenedState {
  std::unique_ptr<StateDir> dir;
  std::vector<GroupRecord> records;
};
absl::StatusOr<OpenedState> OpenStateDir(const std::optional<std::string>& configured);

}  // namespace wsync

#endif  // WSYNC_DAEMON_STATE_DIR_H_
