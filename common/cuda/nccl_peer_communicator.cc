#include "common/cuda/nccl_peer_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_slot.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/nccl_dtype.h"
#include "common/cuda/nccl_wait.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync::cuda {

absl::StatusOr<std::unique_ptr<NcclPeerCommunicator>> NcclPeerCommunicator::Join(
    const NcclLibrary* nccl, int device, const std::string& unique_id, int rank, int world_size,
    absl::Time deadline) {
  if (rank < 1 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("a peer's rank is 1..", world_size - 1,
                                                   " of world ", world_size, ", not ", rank));
  }
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL unique id is ", sizeof(id.internal),
                                                   " bytes, not ", unique_id.size()));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  auto comm = std::unique_ptr<NcclPeerCommunicator>(
      new NcclPeerCommunicator(nccl, device, rank, world_size));
  WSYNC_ASSIGN_OR_RETURN(comm->stream_, Stream::Create(device, /*urgent=*/true));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  WSYNC_RETURN_IF_ERROR(
      nccl->Check(nccl->CommInitRankConfig(&comm->comm_, world_size, id, rank, &config),
                  "ncclCommInitRankConfig"));
  absl::Status ready = comm->WaitFor(nullptr, deadline, "joining the root's NCCL communicator");
  if (!ready.ok()) {
    comm->Abort(ready.message());
    return ready;
  }
  WSYNC_LOG(Info, "joined NCCL communicator as rank ", rank, " of ", world_size, " on device ",
            device, ", NCCL ", nccl->version_string());
  return comm;
}

NcclPeerCommunicator::~NcclPeerCommunicator() {
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (comm_ == nullptr) return;
  auto guard = DeviceGuard::Create(device_);
  // A peer leaves without waiting on the root: an abort needs nobody else.
  nccl_->CommAbort(comm_);
  comm_ = nullptr;
}

absl::Status NcclPeerCommunicator::WaitFor(cudaEvent_t done, absl::Time deadline,
                                           absl::string_view what) {
  absl::Status s = WaitForComm(*nccl_, comm_mu_, comm_, abort_, done, deadline, what);
  if (!s.ok() && s.code() != absl::StatusCode::kAborted) Abort(s.message());
  return s;
}

absl::Status NcclPeerCommunicator::ReceiveInto(SlotMemory& slot,
                                               const std::vector<BroadcastPiece>& pieces,
                                               absl::Time deadline) {
  auto* cuda_slot = dynamic_cast<CudaSlot*>(&slot);
  if (cuda_slot == nullptr || slot.device() != device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL receives into a CUDA slot of device ", device_));
  }
  WSYNC_RETURN_IF_ERROR(CheckPiecesFit(slot, pieces));
  std::vector<ncclDataType_t> types;
  for (const BroadcastPiece& p : pieces) {
    WSYNC_ASSIGN_OR_RETURN(ncclDataType_t type, NcclTypeOf(p.dtype));
    types.push_back(type);
  }
  std::lock_guard<std::mutex> order(receive_mu_);
  WSYNC_ASSIGN_OR_RETURN(auto done, TimingEvent::Create(device_));
  // Once one piece is queued the communicator has taken a broadcast of the root's: a receive that
  // fails after that leaves it out of step with the root (the next receive would pair with the
  // wrong broadcast), so any failure from there on aborts it.
  absl::Status queued = [&]() -> absl::Status {
    WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr || abort_.aborted()) return absl::AbortedError("communicator aborted");
    cudaStream_t stream = stream_->get();
    for (size_t i = 0; i < pieces.size(); ++i) {
      void* p = static_cast<char*>(slot.data()) + pieces[i].offset;
      WSYNC_RETURN_IF_ERROR(SettleQueued(
          *nccl_, comm_, nccl_->Broadcast(p, p, pieces[i].count, types[i], 0, comm_, stream),
          abort_, deadline, absl::StrCat("the receive of piece ", i)));
    }
    // What waits on the slot's producer event (the local groups' launches) orders after this.
    // After a failure the slot's bytes and that event are undefined until the next receive.
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(cuda_slot->producer_event(), stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(done->get(), stream));
    return absl::OkStatus();
  }();
  if (!queued.ok()) {
    if (queued.code() != absl::StatusCode::kAborted) Abort(queued.message());
    return queued;
  }
  absl::Status s =
      WaitFor(done->get(), deadline,
              absl::StrCat("receiving ", pieces.size(), " broadcast piece(s) as rank ", rank_));
  // `done` is destroyed only once the receives finished or the communicator was aborted.
  return s;
}

void NcclPeerCommunicator::Abort(absl::string_view reason) {
  if (!abort_.Mark(reason)) return;
  AbortComm(*nccl_, device_, comm_mu_, comm_, absl::StrCat("rank ", rank_), reason);
}

std::string NcclPeerCommunicator::Describe() const {
  return absl::StrCat("NCCL ", nccl_->version_string(), " (", nccl_->path(), ") rank ", rank_,
                      " of ", world_size_, " on device ", device_);
}

}  // namespace wsync::cuda
