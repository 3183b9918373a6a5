#ifndef WSYNC_COMMON_CUDA_NCCL_PEER_COMMUNICATOR_H_
#define WSYNC_COMMON_CUDA_NCCL_PEER_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/cuda/nccl_library.h"
#include "common/cuda/nccl_wait.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

// wsyncd as a peer rank of another wsyncd's NCCL communicator (the node relay's downstream):
// receives root 0's broadcasts into its own CUDA slots on a stream of its own. Joining and every
// receive are polled with a deadline; one that passes aborts the communicator.
class NcclPeerCommunicator final : public PeerCommunicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclPeerCommunicator>> Join(const NcclLibrary* nccl,
                                                                    int device,
                                                                    const std::string& unique_id,
                                                                    int rank, int world_size,
                                                                    absl::Time deadline);
  ~NcclPeerCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status ReceiveInto(SlotMemory& slot, const std::vector<BroadcastPiece>& pieces,
                           absl::Time deadline) override;
  void Abort(absl::string_view reason) override;
  std::string Describe() const override;

 private:
  NcclPeerCommunicator(const NcclLibrary* nccl, int device, int rank, int world_size)
      : nccl_(nccl), device_(device), rank_(rank), world_size_(world_size) {}
  // Polls until `done` (an event; null: the communicator's init) completed.
  absl::Status WaitFor(cudaEvent_t done, absl::Time deadline, absl::string_view what);

  const NcclLibrary* nccl_;
  const int device_;
  const int rank_;
  const int world_size_;
  std::unique_ptr<Stream> stream_;
  std::mutex receive_mu_;  // one receive at a time: broadcasts arrive in order
  std::mutex comm_mu_;     // guards comm_ against Abort from another thread
  ncclComm_t comm_ = nullptr;
  CommAbortState abort_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_NCCL_PEER_COMMUNICATOR_H_
