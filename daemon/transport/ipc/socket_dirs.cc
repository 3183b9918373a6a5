#include "daemon/transport/ipc/socket_dirs.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/net.h"

namespace wsync {
namespace {

std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", rd() & 0xff);
  return out;
}

bool IsDecimal(absl::string_view s) {
  return !s.empty() && s.size() <= 20 && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
}

bool IsLowerHex(absl::string_view s, size_t digits) {
  return s.size() == digits && std::all_of(s.begin(), s.end(), [](char c) {
           return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

// This process's PID namespace, as the inode /proc/self/ns/pid names ("pid:[4026531836]").
std::string PidNamespace() {
  char target[64];
  const ssize_t n = ::readlink("/proc/self/ns/pid", target, sizeof(target));
  if (n <= 0) return "0";
  std::string digits;
  for (char c : absl::string_view(target, static_cast<size_t>(n))) {
    if (absl::ascii_isdigit(c)) digits.push_back(c);
  }
  return digits.empty() ? "0" : digits;
}

// The pid a directory's name gives, when the name is one of wsyncd's and its namespace (if it
// names one) is this process's; 0 otherwise.
pid_t OwnerPid(absl::string_view name, const std::string& pid_namespace) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  if (parts.size() < 3 || parts.size() > 4 || parts[0] != "wsyncd" || !IsDecimal(parts[1]) ||
      !IsLowerHex(parts.back(), 8)) {
    return 0;
  }
  if (parts.size() == 4 && (!IsDecimal(parts[2]) || parts[2] != pid_namespace)) return 0;
  pid_t pid = 0;
  if (!absl::SimpleAtoi(parts[1], &pid) || pid <= 0) return 0;
  return pid;
}

bool ProcessExists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// The unix socket paths bound in this network namespace.
std::set<std::string> BoundSocketPaths() {
  std::set<std::string> out;
  std::ifstream in("/proc/net/unix");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 8 && absl::StartsWith(f[7], "/")) out.emplace(f[7]);
  }
  return out;
}

// Removes `name` under `base_fd` (`base` is its path) if it is a directory of wsyncd's user
// holding nothing but wsyncd's sockets, none bound. Never follows a link.
bool RemoveIfOnlySockets(int base_fd, const std::string& base, const std::string& name,
                         const std::set<std::string>& bound) {
  struct stat st {};
  if (::fstatat(base_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != ::geteuid()) {
    return false;
  }
  UniqueFd dir_fd(::openat(base_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat opened {};
  if (!dir_fd.valid() || ::fstat(dir_fd.get(), &opened) != 0 || opened.st_ino != st.st_ino ||
      opened.st_dev != st.st_dev) {
    return false;
  }
  DIR* d = ::fdopendir(::dup(dir_fd.get()));
  if (d == nullptr) return false;
  std::vector<std::string> sockets;
  bool only_sockets = true;
  while (dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry == "." || entry == "..") continue;
    struct stat es {};
    if (!absl::EndsWith(entry, ".sock") || !IsLowerHex(entry.substr(0, entry.size() - 5), 16) ||
        ::fstatat(dir_fd.get(), entry.c_str(), &es, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISSOCK(es.st_mode) || bound.count(absl::StrCat(base, "/", name, "/", entry)) != 0) {
      only_sockets = false;
      break;
    }
    sockets.push_back(entry);
  }
  ::closedir(d);
  if (!only_sockets) return false;
  for (const std::string& s : sockets) ::unlinkat(dir_fd.get(), s.c_str(), 0);
  return ::unlinkat(base_fd, name.c_str(), AT_REMOVEDIR) == 0;
}

}  // namespace

std::string NewSocketDirName() {
  return absl::StrCat("wsyncd-", ::getpid(), "-", PidNamespace(), "-", RandomHex(4));
}

std::string NewSocketFileName() { return absl::StrCat(RandomHex(8), ".sock"); }

std::vector<std::string> RemoveDeadSocketDirs(const std::string& base) {
  std::vector<std::string> removed;
  UniqueFd base_fd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!base_fd.valid()) return removed;
  const std::string pid_namespace = PidNamespace();
  std::vector<std::pair<std::string, pid_t>> candidates;
  {
    DIR* d = ::fdopendir(::dup(base_fd.get()));
    if (d == nullptr) return removed;
    while (dirent* e = ::readdir(d)) {
      const pid_t pid = OwnerPid(e->d_name, pid_namespace);
      if (pid != 0 && pid != ::getpid()) candidates.emplace_back(e->d_name, pid);
    }
    ::closedir(d);
  }
  if (candidates.empty()) return removed;
  const std::set<std::string> bound = BoundSocketPaths();
  for (const auto& [name, pid] : candidates) {
    if (ProcessExists(pid)) continue;
    if (RemoveIfOnlySockets(base_fd.get(), base, name, bound)) removed.push_back(name);
  }
  return removed;
}

}  // namespace wsync
