#include "common/host/host_peer_communicator.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace wsync {

absl::StatusOr<std::unique_ptr<HostPeerCommunicator>> HostPeerCommunicator::Join(
    absl::string_view unique_id, int rank, int world_size, absl::Time deadline) {
  if (rank < 1 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("a peer's rank is 1..", world_size - 1,
                                                   " of world ", world_size, ", not ", rank));
  }
  WSYNC_ASSIGN_OR_RETURN(auto peer,
                         HostCollectivePeer::Join(unique_id, rank, world_size, deadline));
  return std::unique_ptr<HostPeerCommunicator>(
      new HostPeerCommunicator(std::move(peer), rank, world_size));
}

absl::Status HostPeerCommunicator::ReceiveInto(SlotMemory& slot,
                                               const std::vector<BroadcastPiece>& pieces,
                                               absl::Time deadline) {
  WSYNC_RETURN_IF_ERROR(CheckPiecesFit(slot, pieces));
  std::lock_guard<std::mutex> lock(receive_mu_);
  char* base = static_cast<char*>(slot.data());
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (aborted_) {
      std::lock_guard<std::mutex> reason(reason_mu_);
      return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
    }
    absl::Status s = peer_->Receive(base + pieces[i].offset, pieces[i].bytes(), deadline);
    if (!s.ok() && aborted_) {
      // Abort from another thread shut the socket under the receive.
      std::lock_guard<std::mutex> reason(reason_mu_);
      return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
    }
    if (!s.ok()) {
      // A broadcast read in part leaves the stream between two frames: nothing later can be read.
      Abort(s.message());
      return absl::Status(s.code(),
                          absl::StrCat("rank ", rank_, ", piece ", i, " of ", pieces.size(), " (",
                                       pieces[i].bytes(), " bytes at offset ", pieces[i].offset,
                                       "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

void HostPeerCommunicator::Abort(absl::string_view reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    if (aborted_) return;
    abort_reason_ = std::string(reason);
    aborted_ = true;
  }
  peer_->Shutdown();
}

std::string HostPeerCommunicator::Describe() const {
  return absl::StrCat("host collective rank ", rank_, " of ", world_size_);
}

}  // namespace wsync
