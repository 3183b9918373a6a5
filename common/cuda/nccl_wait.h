#ifndef WSYNC_COMMON_CUDA_NCCL_WAIT_H_
#define WSYNC_COMMON_CUDA_NCCL_WAIT_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/cuda/nccl_library.h"

namespace wsync::cuda {

// A communicator's end, as its owner keeps it: the first abort's reason, written before the
// flag that every waiter reads without a lock.
class CommAbortState {
 public:
  // Records `reason` and sets the flag; false when an abort came first.
  bool Mark(absl::string_view reason);
  bool aborted() const { return aborted_; }
  // Valid once aborted() is true.
  const std::string& reason() const { return reason_; }

 private:
  std::mutex mu_;  // orders Mark calls
  std::atomic<bool> aborted_{false};
  std::string reason_;
};

// A call on a non-blocking communicator answered `result`: while that is ncclInProgress (the
// communicator still connecting), polls `comm` every 20 us until it settles, `end` is marked
// (ABORTED) or the deadline passes ("<what> could not be queued before the deadline"); then the
// call's NCCL status. The caller holds `comm`'s mutex, which Abort takes only after marking `end`.
absl::Status SettleQueued(const NcclLibrary& nccl, ncclComm_t comm, ncclResult_t result,
                          const CommAbortState& end, absl::Time deadline, absl::string_view what);

// The second half of an abort: ncclCommAbort on `comm` (under `comm_mu`, on `device`), which is
// null afterwards; `who` names the communicator in the log line.
void AbortComm(const NcclLibrary& nccl, int device, std::mutex& comm_mu, ncclComm_t& comm,
               absl::string_view who, absl::string_view reason);

// What a communicator's owner waits with: `comm` (guarded by `comm_mu`; null once aborted) has
// no error and `done` completed (an event; null: the communicator's init). ABORTED once
// `end` says so, the NCCL error where the communicator reports one, DEADLINE_EXCEEDED naming
// `what` at the deadline. It polls, never blocking past the deadline: the next transfer is often
// queued only once a wait returns, so its latency is a gap on the wire. It polls without
// sleeping for the first half millisecond, then every 20 us for as long as a 4 GiB broadcast
// takes, then every 200 us (communicator setup, a hung peer); after 2 s it logs at debug level
// what it still waits for.
absl::Status WaitForComm(const NcclLibrary& nccl, std::mutex& comm_mu, const ncclComm_t& comm,
                         const CommAbortState& end, cudaEvent_t done, absl::Time deadline,
                         absl::string_view what);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_NCCL_WAIT_H_
