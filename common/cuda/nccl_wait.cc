#include "common/cuda/nccl_wait.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/cuda_status.h"
#include "common/log.h"

namespace wsync::cuda {

bool CommAbortState::Mark(absl::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return false;
  reason_ = std::string(reason);
  aborted_ = true;
  return true;
}

void AbortComm(const NcclLibrary& nccl, int device, std::mutex& comm_mu, ncclComm_t& comm,
               absl::string_view who, absl::string_view reason) {
  std::lock_guard<std::mutex> lock(comm_mu);
  if (comm == nullptr) return;
  auto guard = DeviceGuard::Create(device);
  WSYNC_LOG(Warning, "aborting NCCL communicator (", who, "): ", reason);
  nccl.CommAbort(comm);
  comm = nullptr;
}

absl::Status SettleQueued(const NcclLibrary& nccl, ncclComm_t comm, ncclResult_t result,
                          const CommAbortState& end, absl::Time deadline, absl::string_view what) {
  while (result == ncclInProgress) {
    if (end.aborted()) return absl::AbortedError("communicator aborted");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " could not be queued before the deadline"));
    }
    absl::SleepFor(absl::Microseconds(20));
    nccl.CommGetAsyncError(comm, &result);
  }
  return nccl.Check(result, std::string(what).c_str());
}

absl::Status WaitForComm(const NcclLibrary& nccl, std::mutex& comm_mu, const ncclComm_t& comm,
                         const CommAbortState& end, cudaEvent_t done, absl::Time deadline,
                         absl::string_view what) {
  const absl::Time started = absl::Now();
  const absl::Time slow_at = started + absl::Seconds(2);
  bool reported_slow = false;
  while (true) {
    if (end.aborted()) {
      return absl::AbortedError(absl::StrCat("communicator aborted: ", end.reason()));
    }
    ncclResult_t state = ncclInProgress;
    cudaError_t event_state = cudaErrorNotReady;
    {
      std::lock_guard<std::mutex> lock(comm_mu);
      if (comm == nullptr) return absl::AbortedError("communicator gone");
      nccl.CommGetAsyncError(comm, &state);
      if (state == ncclSuccess) event_state = done == nullptr ? cudaSuccess : cudaEventQuery(done);
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return nccl.Check(state, std::string(what).c_str());
    }
    if (state == ncclSuccess && event_state == cudaSuccess) return absl::OkStatus();
    if (state == ncclSuccess && event_state != cudaErrorNotReady) {
      return WSYNC_CUDA_STATUS(event_state);
    }
    if (!reported_slow && absl::Now() >= slow_at) {
      reported_slow = true;
      WSYNC_LOG(Debug, what, ": still waiting after 2 s (NCCL state ", static_cast<int>(state),
                ", event ", state == ncclSuccess ? cudaGetErrorName(event_state) : "not queried",
                ")");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not complete before its deadline"));
    }
    const absl::Duration waited = absl::Now() - started;
    if (waited < absl::Microseconds(500)) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(waited < absl::Milliseconds(20) ? absl::Microseconds(20)
                                                     : absl::Microseconds(200));
    }
  }
}

}  // namespace wsync::cuda
