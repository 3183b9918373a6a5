#ifndef WSYNC_COMMON_HOST_FAULT_GUARD_H_
#define WSYNC_COMMON_HOST_FAULT_GUARD_H_

// Accesses to memory a trainer can shrink under wsyncd.
//
// In host mode wsyncd maps shared-memory segments a trainer can ftruncate at any time: the slots
// (the trainer maps them read-write) and pull-mode sources (the trainer made them). An access past
// the new end raises SIGBUS, whose default action ends wsyncd. shm_open'd tmpfs files cannot be
// sealed against shrinking, and the gRPC channel gives no socket to pass sealed memfds over, so
// instead every such access wsyncd makes runs under a guard:
// - one process-wide SIGBUS handler, installed once, looks for a guard of the faulting thread (a
//   fault signal goes to the thread that faulted) whose ranges hold the faulting address;
// - it siglongjmps back to that guard, which returns the address, and the caller fails the bucket;
// - any other SIGBUS goes on to the handler that was installed before, or kills the process as it
//   would have without this one.
//
// The guarded function is abandoned mid-way, so it must be a plain loop over memory (memcpy, a
// CRC): no locks, no allocation, no objects with destructors, nothing that must run to the end.
// The handler only reads a thread-local pointer and the guard's ranges, and siglongjmps (both
// async-signal-safe). Only wsyncd installs it; trainer processes never run guarded code.

#include <cstddef>
#include <cstdint>

namespace wsync {

// Memory a guard covers: a fault at an address outside every range of the thread's guards is not
// taken for a shrunken segment and kills the process as usual.
struct GuardedRange {
  const void* begin = nullptr;
  uint64_t bytes = 0;
  bool Contains(const void* address) const;
};

// Installs the SIGBUS handler; later calls do nothing. wsyncd calls it at start in host mode;
// RunGuarded calls it too, for callers that did not.
void InstallFaultGuard();

// Runs fn(arg); returns nullptr once it returns, or the address whose access raised SIGBUS
// (BUS_ADRERR, an access past the end of a mapped file) inside `ranges`. Guards nest: the innermost
// guard of the thread whose ranges hold the address takes the fault.
const void* RunGuarded(const GuardedRange* ranges, size_t count, void (*fn)(void*), void* arg);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_FAULT_GUARD_H_
