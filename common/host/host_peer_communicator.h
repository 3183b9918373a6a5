#ifndef WSYNC_COMMON_HOST_HOST_PEER_COMMUNICATOR_H_
#define WSYNC_COMMON_HOST_HOST_PEER_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/gpu_seam.h"
#include "common/host/host_collective.h"

namespace wsync {

// PeerCommunicator over the TCP collective (HostCollectivePeer): each piece is one broadcast of
// the root's, read straight into the slot's shared memory.
class HostPeerCommunicator final : public PeerCommunicator {
 public:
  static absl::StatusOr<std::unique_ptr<HostPeerCommunicator>> Join(absl::string_view unique_id,
                                                                    int rank, int world_size,
                                                                    absl::Time deadline);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status ReceiveInto(SlotMemory& slot, const std::vector<BroadcastPiece>& pieces,
                           absl::Time deadline) override;
  void Abort(absl::string_view reason) override;
  std::string Describe() const override;

 private:
  HostPeerCommunicator(std::unique_ptr<HostCollectivePeer> peer, int rank, int world_size)
      : peer_(std::move(peer)), rank_(rank), world_size_(world_size) {}

  std::mutex receive_mu_;  // one receive at a time, as broadcasts arrive in order
  std::unique_ptr<HostCollectivePeer> peer_;
  const int rank_;
  const int world_size_;
  std::atomic<bool> aborted_{false};
  std::mutex reason_mu_;
  std::string abort_reason_;  // guarded by reason_mu_
};

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_HOST_PEER_COMMUNICATOR_H_
