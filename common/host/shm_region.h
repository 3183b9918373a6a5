#ifndef WSYNC_COMMON_HOST_SHM_REGION_H_
#define WSYNC_COMMON_HOST_SHM_REGION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace wsync {

// POSIX shared memory as host mode uses it: slots (daemon -> trainer) and pull-mode source arenas
// (trainer -> daemon). Segments are created 0600, so only the creating user can map them.

// Creates `name` (which must not exist) with `bytes` bytes and maps it read-write. On failure
// nothing is left behind.
absl::StatusOr<void*> CreateShm(const std::string& name, uint64_t bytes);

// Maps the first `bytes` of an existing segment; FAILED_PRECONDITION when it holds fewer.
absl::StatusOr<void*> OpenShm(const std::string& name, uint64_t bytes, bool writable);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_SHM_REGION_H_
