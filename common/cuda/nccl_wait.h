#ifndef WSYNC_COMMON_CUDA_NCCL_WAIT_H_
#define WSYNC_COMMON_CUDA_NCCL_WAIT_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/cuda/nccl_library.h"

namespace wsync::cuda {

// Calls `poll` until it answers true (done) or an error, or the deadline passes
// (DEADLINE_EXCEEDED naming `what`). NCCL's communicators are waited by polling (a non-blocking
// communicator's state, an event), never by a blocking call that could outlive the deadline.
// The next transfer is often queued only once a wait returns, so its latency is a gap on the
// wire: it polls without sleeping for the first half millisecond, then every 20 us for as long
// as a 4 GiB broadcast takes, then every 200 us (communicator setup, a hung peer); after 2 s it
// logs at debug level what it still waits for, with `state()`'s description.
absl::Status PollUntil(const std::function<absl::StatusOr<bool>()>& poll,
                       const std::function<std::string()>& state, absl::Time deadline,
                       absl::string_view what);

// What a communicator's owner waits with: `comm` (guarded by `comm_mu`; null once aborted) has
// no error and `done` completed (an event; null: the communicator's init). ABORTED once
// `aborted` is set (with `abort_reason`, written before it), the NCCL error where the
// communicator reports one.
absl::Status WaitForComm(const NcclLibrary& nccl, std::mutex& comm_mu, const ncclComm_t& comm,
                         const std::atomic<bool>& aborted, const std::string& abort_reason,
                         cudaEvent_t done, absl::Time deadline, absl::string_view what);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_NCCL_WAIT_H_
