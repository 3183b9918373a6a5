#include "common/cuda/nccl_communicator.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cuda/cuda_slot.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/nccl_dtype.h"
#include "common/cuda/nccl_wait.h"
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
  WSYNC_ASSIGN_OR_RETURN(comm->stream_, Stream::Create(device, /*urgent=*/true));
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
  if (!ready_ || abort_.aborted()) {
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

absl::Status NcclRootCommunicator::WaitFor(cudaEvent_t done, absl::Time deadline,
                                           absl::string_view what) {
  return WaitForComm(*nccl_, comm_mu_, comm_, abort_, done, deadline, what);
}

absl::Status NcclRootCommunicator::WaitReady(absl::Time deadline) {
  if (ready_) return absl::OkStatus();
  absl::Status s = WaitFor(nullptr, deadline, "NCCL communicator initialisation");
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
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> NcclRootCommunicator::StartBroadcastFrom(
    SlotMemory& slot, const void* base, const std::vector<BroadcastPiece>& pieces,
    absl::Time deadline) {
  auto* cuda_slot = dynamic_cast<CudaSlot*>(&slot);
  if (cuda_slot == nullptr || slot.device() != device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL broadcasts from a CUDA slot of device ", device_));
  }
  std::vector<ncclDataType_t> types;
  for (const BroadcastPiece& p : pieces) {
    WSYNC_ASSIGN_OR_RETURN(ncclDataType_t type, NcclTypeOf(p.dtype));
    types.push_back(type);
  }
  std::lock_guard<std::mutex> order(broadcast_mu_);
  WSYNC_RETURN_IF_ERROR(WaitReady(deadline));
  Ticket ticket;
  WSYNC_ASSIGN_OR_RETURN(ticket.start, TimingEvent::Create(device_));
  WSYNC_ASSIGN_OR_RETURN(ticket.end, TimingEvent::Create(device_));
  ticket.previous_end = last_end_;
  {
    WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr || abort_.aborted()) return absl::AbortedError("communicator aborted");
    cudaStream_t stream = stream_->get();
    // The GPU, not the host, orders the broadcast after the trainer's writes (to the slot, or in
    // pull mode to its own tensors: the slot's event covers both).
    WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, cuda_slot->producer_event(), 0));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(ticket.start->get(), stream));
    for (size_t i = 0; i < pieces.size(); ++i) {
      // In place at the root: NCCL only reads from it.
      void* p = const_cast<char*>(static_cast<const char*>(base)) + pieces[i].offset;
      // A non-blocking communicator may still be connecting; the next call must wait for it.
      WSYNC_RETURN_IF_ERROR(SettleQueued(
          *nccl_, comm_, nccl_->Broadcast(p, p, pieces[i].count, types[i], 0, comm_, stream),
          abort_, deadline, "ncclBroadcast"));
    }
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(ticket.end->get(), stream));
  }
  last_end_ = ticket.end;
  const uint64_t id = next_ticket_++;
  std::lock_guard<std::mutex> lock(tickets_mu_);
  tickets_.emplace(id, std::move(ticket));
  return id;
}

absl::Status NcclRootCommunicator::WarmUpAllReduce(absl::Time deadline) {
  // Under broadcast_mu_: nothing may be queued on the stream before it.
  std::lock_guard<std::mutex> order(broadcast_mu_);
  WSYNC_RETURN_IF_ERROR(WaitReady(deadline));
  WSYNC_ASSIGN_OR_RETURN(auto zero, DeviceBuffer::Create(device_, sizeof(float)));
  WSYNC_ASSIGN_OR_RETURN(auto done, TimingEvent::Create(device_));
  {
    WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr || abort_.aborted()) return absl::AbortedError("communicator aborted");
    cudaStream_t stream = stream_->get();
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(zero->data(), 0, sizeof(float), stream));
    WSYNC_RETURN_IF_ERROR(SettleQueued(
        *nccl_, comm_,
        nccl_->AllReduce(zero->data(), zero->data(), 1, ncclFloat32, ncclSum, comm_, stream),
        abort_, deadline, "the warm-up ncclAllReduce"));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(done->get(), stream));
  }
  absl::Status s = WaitFor(done->get(), deadline, "the warm-up ncclAllReduce");
  if (!s.ok() && s.code() != absl::StatusCode::kAborted) Abort(s.message());
  // `zero` is freed only after the all-reduce finished or the communicator was aborted.
  return s;
}

absl::StatusOr<WireTiming> NcclRootCommunicator::WaitBroadcast(uint64_t ticket,
                                                               absl::Time deadline) {
  Ticket t;
  {
    std::lock_guard<std::mutex> lock(tickets_mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return absl::InvalidArgumentError("no such broadcast ticket");
    t = it->second;
    tickets_.erase(it);
  }
  absl::Status s = WaitFor(t.end->get(), deadline, absl::StrCat("ncclBroadcast ", ticket));
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kAborted) Abort(s.message());
    return s;
  }
  WireTiming timing;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, t.start->get(), t.end->get()) == cudaSuccess) {
    timing.wire_seconds = ms / 1e3;
  }
  if (t.previous_end != nullptr &&
      cudaEventElapsedTime(&ms, t.previous_end->get(), t.start->get()) == cudaSuccess) {
    timing.idle_seconds = ms > 0 ? ms / 1e3 : 0;
  }
  return timing;
}

void NcclRootCommunicator::Abort(absl::string_view reason) {
  if (!abort_.Mark(reason)) return;
  AbortComm(*nccl_, device_, comm_mu_, comm_, "rank 0", reason);
}

std::string NcclRootCommunicator::Describe() const {
  return absl::StrCat("NCCL ", nccl_->version_string(), " (", nccl_->path(), ") rank 0 on device ",
                      device_);
}

}  // namespace wsync::cuda
