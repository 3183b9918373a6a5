#ifndef WSYNC_COMMON_HOST_SHM_SWEEP_H_
#define WSYNC_COMMON_HOST_SHM_SWEEP_H_

// What host-mode processes that died left in /dev/shm. wsyncd removes its slots when it stops and a
// client its arenas when they go, but a process that is killed (SIGKILL, a crash) leaves them, and
// each holds its full size in memory until removed. Every segment's name carries the pid of the
// process that made it (shm_names.h), so wsyncd sweeps at start (host mode) what belongs to pids
// that are gone.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// The pid in a directory entry named wsync-<pid>-..., or nullopt for any other name.
std::optional<int> ShmOwnerPid(absl::string_view entry);

struct SweptShm {
  std::string entry;  // the file's name in the directory
  int pid = 0;        // its maker, who is gone
  uint64_t bytes = 0;
};

// Removes from `dir` every entry named wsync-<pid>-... that is a regular file (not followed if a
// link) owned by this process's uid, and whose <pid> names no live process (kill(pid, 0) fails
// with ESRCH; a zombie, or a process of another uid, counts as live). Removing the name frees the
// memory only once no process maps it, so a survivor that still maps such a segment keeps it.
// Liveness is judged in this process's pid namespace: a wsyncd must not share /dev/shm with host-
// mode processes of another pid namespace. Returns what was removed.
absl::StatusOr<std::vector<SweptShm>> SweepDeadShm(const std::string& dir);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_SHM_SWEEP_H_
