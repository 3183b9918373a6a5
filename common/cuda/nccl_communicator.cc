#include "common/cuda/nccl_communicator.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cuda/cuda_status.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync::cuda {

absl::StatusOr<std::unique_ptr<NcclRootCommunicator>> NcclRootCommunicator::Create(
    const NcclLibrary* nccl, int device, int world_size) {
  if (world_size < 2) return absl::InvalidArgumentError("world size must be at least 2");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  ncclUniqueId id;
  WSYNC_RETURN_IF_ERROR(nccl->Check(nccl->GetUniqueId(&id), "ncclGetUniqueId"));
  auto comm = std::unique_ptr<NcclRootCommunicator>(new NcclRootCommunicator(
      nccl, device, world_size, std::string(id.internal, sizeof(id.internal))));
  WSYNC_ASSIGN_OR_RETURN(comm->stream_, Stream::Create(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  WSYNC_RETURN_IF_ERROR(
      nccl->Check(nccl->CommInitRankConfig(&comm->comm_, world_size, id, 0, &config),
                  "ncclCommInitRankConfig"));
  return comm;
}

NcclRootCommunicator::~NcclRootCommunicator() {
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (comm_ == nullptr) return;
  auto guard = DeviceGuard::Create(device_);
  // A communicator that never became ready (or whose peers are gone) cannot finalize.
  if (!ready_ || aborted_) {
    nccl_->CommAbort(comm_);
  } else {
    nccl_->CommFinalize(comm_);
    ncclResult_t state = ncclInProgress;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (state == ncclInProgress && absl::Now() < deadline) {
      nccl_->CommGetAsyncError(comm_, &state);
      if (state == ncclInProgress) absl::SleepFor(absl::Milliseconds(1));
    }
    if (state == ncclSuccess) {
      nccl_->CommDestroy(comm_);
    } else {
      nccl_->CommAbort(comm_);
    }
  }
  comm_ = nullptr;
}

absl::Status NcclRootCommunicator::WaitIdle(absl::Time deadline, absl::string_view what) {
  while (true) {
    if (aborted_) return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
    ncclResult_t state = ncclInProgress;
    cudaError_t stream_state = cudaErrorNotReady;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ == nullptr) return absl::AbortedError("communicator gone");
      nccl_->CommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) stream_state = cudaStreamQuery(stream_->get());
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return nccl_->Check(state, std::string(what).c_str());
    }
    if (state == ncclSuccess && stream_state == cudaSuccess) return absl::OkStatus();
    if (state == ncclSuccess && stream_state != cudaErrorNotReady) {
      return WSYNC_CUDA_STATUS(stream_state);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not complete before its deadline"));
    }
    absl::SleepFor(absl::Microseconds(200));
  }
}

absl::Status NcclRootCommunicator::Broadcast(SlotMemory& slot, uint64_t offset, uint64_t bytes,
                                             absl::Time deadline) {
  if (slot.kind() != MemoryKind::kCudaIpc || slot.device() != device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL broadcasts from a CUDA slot of device ", device_));
  }
  std::lock_guard<std::mutex> order(broadcast_mu_);
  if (!ready_) {
    absl::Status s = WaitIdle(deadline, "NCCL communicator initialisation");
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      s = absl::DeadlineExceededError(absl::StrCat(
          "the engine ranks never joined NCCL rank 0 (world ", world_size_,
          "): they did not fetch the unique id from the store, or cannot reach this GPU; an "
          "engine whose default process group is bound to a device (device_id) builds the group "
          "with ncclCommSplit and never joins an external rank 0"));
    }
    if (!s.ok()) {
      Abort(s.message());
      return s;
    }
    ready_ = true;
    WSYNC_LOG(Info, "NCCL communicator ready: world ", world_size_, ", device ", device_, ", NCCL ",
              nccl_->version_string());
  }
  {
    auto guard = DeviceGuard::Create(device_);
    if (!guard.ok()) return guard.status();
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr || aborted_) return absl::AbortedError("communicator aborted");
    void* p = static_cast<char*>(slot.data()) + offset;
    WSYNC_RETURN_IF_ERROR(nccl_->Check(
        nccl_->Broadcast(p, p, bytes, ncclUint8, 0, comm_, stream_->get()), "ncclBroadcast"));
  }
  absl::Status s = WaitIdle(deadline, absl::StrCat("ncclBroadcast of ", bytes, " bytes"));
  if (!s.ok() && s.code() != absl::StatusCode::kAborted) Abort(s.message());
  return s;
}

void NcclRootCommunicator::Abort(absl::string_view reason) {
  if (aborted_.exchange(true)) return;
  abort_reason_ = std::string(reason);
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (comm_ == nullptr) return;
  auto guard = DeviceGuard::Create(device_);
  WSYNC_LOG(Warning, "aborting NCCL communicator: ", reason);
  nccl_->CommAbort(comm_);
  comm_ = nullptr;
}

std::string NcclRootCommunicator::Describe() const {
  return absl::StrCat("NCCL ", nccl_->version_string(), " rank 0 on device ", device_);
}

}  // namespace wsync::cuda
