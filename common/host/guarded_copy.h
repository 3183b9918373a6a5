#ifndef WSYNC_COMMON_HOST_GUARDED_COPY_H_
#define WSYNC_COMMON_HOST_GUARDED_COPY_H_

// wsyncd's copies and checksums of memory a trainer can shrink, each under a fault guard
// (fault_guard.h): a truncated segment ends them with the faulting address instead of a SIGBUS.

#include <cstdint>
#include <vector>

#include "common/host/fault_guard.h"

namespace wsync {

struct GuardedCopyPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

// Copies the pieces in order; nullptr, or the faulting address inside `ranges` (the copy stopped
// there: a prefix of the pieces may have been written).
const void* GuardedCopy(const std::vector<GuardedRange>& ranges,
                        const std::vector<GuardedCopyPiece>& pieces);

struct GuardedCrc {
  uint32_t crc = 0;
  const void* fault = nullptr;  // non-null: crc is meaningless
};

// CRC-32 of `bytes` at `data` (Crc32Parallel's value), with up to `threads` threads, each under its
// own guard: a fault is taken by the thread that faults.
GuardedCrc GuardedCrc32(const std::vector<GuardedRange>& ranges, const void* data, uint64_t bytes,
                        int threads);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_GUARDED_COPY_H_
