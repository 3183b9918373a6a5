#include "daemon/state_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/config.h"
#include "daemon/engines/builtin_engine_kinds.h"
#include "daemon/transport/builtin_transport_kinds.h"

namespace wsync {
namespace {

constexpr int kFormat = 1;
constexpr char kSuffix[] = ".json";

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// mkdir -p with mode 0700 for what it creates.
absl::Status MakeDirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return Errno(absl::StrCat("cannot create ", prefix));
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Errno(absl::StrCat("cannot open ", dir));
  if (::fsync(fd.get()) != 0) return Errno(absl::StrCat("fsync ", dir));
  return absl::OkStatus();
}

absl::Status WriteFileDurably(const std::string& tmp, const std::string& path,
                              const std::string& text) {
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return Errno(absl::StrCat("cannot create ", tmp));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno(absl::StrCat("write ", tmp));
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  // The bytes reach the disk before the name does: a crash never leaves an empty or partial file
  // under the record's name.
  if (::fsync(fd.get()) != 0) {
    absl::Status s = Errno(absl::StrCat("fsync ", tmp));
    ::unlink(tmp.c_str());
    return s;
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = Errno(absl::StrCat("rename ", tmp, " to ", path));
    ::unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

// Takes the lock on `file` for as long as the returned descriptor is open, and writes this
// process's pid into it; refuses naming the pid the holder wrote.
absl::StatusOr<UniqueFd> TakeLock(const std::string& dir, const std::string& file) {
  UniqueFd lock(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return Errno(absl::StrCat("state directory: cannot open ", file));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Errno(absl::StrCat("state directory: cannot lock ", file));
    char text[32] = {};
    const ssize_t n = ::pread(lock.get(), text, sizeof(text) - 1, 0);
    int pid = 0;
    const bool known = n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid) && pid > 0;
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory ", dir, " is in use by ",
        known ? absl::StrCat("wsyncd pid ", pid) : std::string("another wsyncd"), " (it holds ",
        file,
        "); stop it, or give this wsyncd its own directory with --state-dir DIR (config "
        "\"state_dir\")"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(lock.get(), 0) != 0 ||
      ::pwrite(lock.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return Errno(absl::StrCat("state directory: cannot write ", file));
  }
  return lock;
}

bool Absolute(absl::string_view path) { return absl::StartsWith(path, "/"); }

}  // namespace

StateDirEnvironment StateDirEnvironment::OfThisProcess() {
  const auto get = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  StateDirEnvironment env;
  env.state_directory = get("STATE_DIRECTORY");
  env.xdg_state_home = get("XDG_STATE_HOME");
  env.home = get("HOME");
  env.root = ::geteuid() == 0;
  if (env.home.empty()) {
    std::vector<char> buffer(16384);
    passwd entry{};
    passwd* found = nullptr;
    if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 &&
        found != nullptr && found->pw_dir != nullptr) {
      env.home = found->pw_dir;
    }
  }
  return env;
}

absl::StatusOr<DefaultStateDir> ChooseDefaultStateDir(const StateDirEnvironment& env) {
  const std::string systemd(*absl::StrSplit(env.state_directory, ':').begin());
  if (Absolute(systemd)) {
    return DefaultStateDir{systemd, "$STATE_DIRECTORY, systemd's StateDirectory="};
  }
  if (Absolute(env.xdg_state_home)) {
    return DefaultStateDir{absl::StrCat(absl::StripSuffix(env.xdg_state_home, "/"), "/wsync"),
                           "$XDG_STATE_HOME/wsync"};
  }
  if (env.root) return DefaultStateDir{"/var/lib/wsync", "root's default"};
  if (Absolute(env.home)) {
    return DefaultStateDir{absl::StrCat(absl::StripSuffix(env.home, "/"), "/.local/state/wsync"),
                           "$HOME/.local/state/wsync"};
  }
  return absl::FailedPreconditionError(
      "no state directory: $STATE_DIRECTORY, $XDG_STATE_HOME and $HOME are unset or relative; "
      "give one with --state-dir DIR (config \"state_dir\"), or run without one with "
      "--state-dir ''");
}

absl::StatusOr<std::unique_ptr<StateDir>> StateDir::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the state directory is ''");
  const std::string dir(absl::StripSuffix(path, "/"));
  if (absl::Status s = MakeDirs(dir + "/groups"); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("state directory: ", s.message()));
  }
  // A directory that was already there (systemd's and Kubernetes' are made 0755 unless told
  // otherwise) is closed to everyone else: the records name the engines and their groups.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Errno(absl::StrCat("state directory: stat ", dir));
  if ((st.st_mode & 077) != 0 && ::chmod(dir.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "state directory %s is mode %04o and cannot be made 0700 (%s); chmod 0700 it as its "
        "owner, or choose another with --state-dir DIR",
        dir, st.st_mode & 07777, std::strerror(errno)));
  }
  WSYNC_ASSIGN_OR_RETURN(UniqueFd lock, TakeLock(dir, dir + "/lock"));
  return std::unique_ptr<StateDir>(new StateDir(dir, std::move(lock)));
}

std::string StateDir::FileOf(const std::string& group) const {
  // Group names are letters, digits, '_', '-' and '.' (ValidateGroupSpec); with the suffix no
  // name ("." or "..") is a directory.
  return absl::StrCat(path_, "/groups/", group, kSuffix);
}

nlohmann::json StateDir::RecordToJson(const GroupRecord& record) {
  nlohmann::json j = {{"format", kFormat},
                      {"group", GroupSpecToJson(record.spec)},
                      {"engine_group", record.engine_group},
                      {"store_port", record.store_port},
                      {"stale_engine_groups", record.stale_engine_groups},
                      {"last_version", record.last_version},
                      {"needs_full_version", record.needs_full_version},
                      {"trainer_declared", record.trainer_declared}};
  j["open_update"] = record.open_version.empty() ? nlohmann::json(nullptr)
                                                 : nlohmann::json{{"id", record.open_update_id},
                                                                  {"version", record.open_version}};
  return j;
}

absl::StatusOr<GroupRecord> StateDir::RecordFromJson(const nlohmann::json& j) {
  try {
    if (!j.is_object() || j.value("format", 0) != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat("not a group record of format ", kFormat));
    }
    GroupRecord record;
    // A record names built-in kinds only (registered once per process).
    RegisterBuiltinEngineKinds();
    RegisterBuiltinTransportKinds();
    WSYNC_ASSIGN_OR_RETURN(record.spec, GroupSpecFromJson(j.at("group")));
    WSYNC_RETURN_IF_ERROR(ValidateGroupSpec(record.spec));
    record.engine_group = j.at("engine_group").get<std::string>();
    record.store_port = j.value("store_port", uint16_t{0});
    record.stale_engine_groups = j.value("stale_engine_groups", std::vector<std::string>());
    record.last_version = j.value("last_version", std::string());
    record.trainer_declared = j.value("trainer_declared", false);
    if (j.contains("open_update") && j["open_update"].is_object()) {
      record.open_update_id = j["open_update"].value("id", std::string());
      record.open_version = j["open_update"].at("version").get<std::string>();
    }
    record.needs_full_version = j.value("needs_full_version", std::map<std::string, std::string>());
    return record;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

std::vector<GroupRecord> StateDir::LoadAll(std::vector<std::string>* problems) const {
  std::vector<GroupRecord> records;
  const std::string dir = path_ + "/groups";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    problems->push_back(absl::StrCat("cannot read ", dir, ": ", std::strerror(errno)));
    return records;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    // Temporary files of a write that never finished (their record is the file they were to
    // replace) are skipped.
    if (absl::StartsWith(name, ".") || !absl::EndsWith(name, kSuffix)) continue;
    names.emplace_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string file = absl::StrCat(dir, "/", name);
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    auto record = RecordFromJson(j);
    if (!record.ok()) {
      problems->push_back(absl::StrCat(file, ": ", record.status().message()));
      continue;
    }
    if (absl::StrCat(record->spec.name, kSuffix) != name) {
      problems->push_back(
          absl::StrCat(file, ": holds group '", record->spec.name, "', not the file's name"));
      continue;
    }
    records.push_back(std::move(*record));
  }
  return records;
}

absl::Status StateDir::Save(const GroupRecord& record) {
  const std::string path = FileOf(record.spec.name);
  const std::string tmp = absl::StrCat(path_, "/groups/.", record.spec.name, kSuffix, ".tmp");
  const std::string text = RecordToJson(record).dump(2) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  WSYNC_RETURN_IF_ERROR(WriteFileDurably(tmp, path, text));
  // The rename itself is durable only once the directory is.
  return SyncDir(path_ + "/groups");
}

absl::Status StateDir::Remove(const std::string& group) {
  std::lock_guard<std::mutex> lock(mu_);
  if (::unlink(FileOf(group).c_str()) != 0 && errno != ENOENT) {
    return Errno(absl::StrCat("remove ", FileOf(group)));
  }
  return SyncDir(path_ + "/groups");
}

absl::StatusOr<OpenedState> OpenStateDir(const std::optional<std::string>& configured) {
  OpenedState opened;
  std::string path, source = "configured";
  if (configured.has_value()) {
    path = *configured;
  } else {
    WSYNC_ASSIGN_OR_RETURN(DefaultStateDir chosen,
                           ChooseDefaultStateDir(StateDirEnvironment::OfThisProcess()));
    path = chosen.path;
    source = absl::StrCat("the default: ", chosen.source, "; --state-dir chooses another");
  }
  if (path.empty()) {
    WSYNC_LOG(Warning,
              "--state-dir '': if wsyncd dies, the next one cannot drop the groups it left at "
              "the engines (they refuse the new ones until restarted), nor tell which engines it "
              "left paused in the middle of an update");
    return opened;
  }
  WSYNC_ASSIGN_OR_RETURN(opened.dir, StateDir::Open(path));
  std::vector<std::string> problems;
  opened.records = opened.dir->LoadAll(&problems);
  for (const std::string& p : problems) WSYNC_LOG(Error, "state directory: ", p);
  WSYNC_LOG(Info, "state directory ", opened.dir->path(), " (", source,
            "): ", opened.records.size(), " group record(s)");
  return opened;
}

}  // namespace wsync
