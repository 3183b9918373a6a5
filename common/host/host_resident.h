#ifndef WSYNC_COMMON_HOST_HOST_RESIDENT_H_
#define WSYNC_COMMON_HOST_HOST_RESIDENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"

namespace wsync {

// Host mode's resident memory: the process's own heap for either medium (host mode's "GPU" is
// host memory too), copied to and from shared-memory slots with memcpy after checking that the
// slot still holds its bytes.
absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateHostResident(ResidentMedium medium,
                                                                     uint64_t bytes);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_HOST_RESIDENT_H_
