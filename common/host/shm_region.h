#ifndef WSYNC_COMMON_HOST_SHM_REGION_H_
#define WSYNC_COMMON_HOST_SHM_REGION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/net.h"

namespace wsync {

// POSIX shared memory as host mode uses it: slots (daemon -> trainer) and pull-mode source arenas
// (trainer -> daemon). Segments are created 0600, so only the creating user can map them.

// A mapping and the descriptor it was made from. wsyncd keeps the descriptor of every segment a
// trainer can truncate: fstat on it tells whether the segment still holds the mapping (an access
// past its end would raise SIGBUS), and its own slots are grown back through it.
struct ShmSegment {
  void* data = nullptr;
  UniqueFd fd;
};

// Creates `name` (which must not exist) with `bytes` bytes and maps it read-write. On failure
// nothing is left behind.
absl::StatusOr<ShmSegment> CreateShm(const std::string& name, uint64_t bytes);

// Maps the first `bytes` of an existing segment; FAILED_PRECONDITION when it holds fewer.
absl::StatusOr<ShmSegment> OpenShm(const std::string& name, uint64_t bytes, bool writable);

// wsyncd's read-only mapping of a segment a trainer made (a pull source), named by the trainer.
// PERMISSION_DENIED, naming the segment, unless it is a regular file (opened without following a
// symbolic link, and without blocking on a FIFO), owned by wsyncd's own uid, with a single name (a
// hard link would give another segment, such as a slot, a name the trainer chose);
// FAILED_PRECONDITION when it holds fewer than `bytes`.
absl::StatusOr<ShmSegment> OpenTrainerShm(const std::string& name, uint64_t bytes);

// The segment's size now (a trainer may have truncated it since it was mapped).
absl::StatusOr<uint64_t> ShmSize(int fd);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_SHM_REGION_H_
