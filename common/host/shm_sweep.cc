#include "common/host/shm_sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

bool ProcessIsGone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

std::optional<int> ShmOwnerPid(absl::string_view entry) {
  if (!absl::ConsumePrefix(&entry, "wsync-")) return std::nullopt;
  const size_t dash = entry.find('-');
  if (dash == 0 || dash == absl::string_view::npos) return std::nullopt;
  const absl::string_view digits = entry.substr(0, dash);
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int pid = 0;
  if (!absl::SimpleAtoi(digits, &pid) || pid <= 0) return std::nullopt;
  return pid;
}

absl::StatusOr<std::vector<SweptShm>> SweepDeadShm(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::UnavailableError(absl::StrCat("opendir ", dir, ": ", std::strerror(errno)));
  }
  const int dir_fd = ::dirfd(d);
  const uid_t uid = ::geteuid();
  const int self = static_cast<int>(::getpid());
  std::vector<SweptShm> swept;
  while (const dirent* e = ::readdir(d)) {
    const std::optional<int> pid = ShmOwnerPid(e->d_name);
    if (!pid || *pid == self) continue;
    struct stat st {};
    if (::fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != uid || !ProcessIsGone(*pid)) continue;
    if (::unlinkat(dir_fd, e->d_name, 0) != 0) continue;  // gone meanwhile, or not ours to remove
    swept.push_back(SweptShm{e->d_name, *pid, static_cast<uint64_t>(st.st_size)});
  }
  ::closedir(d);
  return swept;
}

}  // namespace wsync
