#ifndef WSYNC_COMMON_CUDA_NCCL_COMMUNICATOR_H_
#define WSYNC_COMMON_CUDA_NCCL_COMMUNICATOR_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/cuda/nccl_library.h"
#include "common/cuda/nccl_wait.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

// wsyncd as rank 0 of an NCCL communicator. Initialisation is non-blocking: it completes only when
// the engines run their first collective, which happens inside their first update request.
// Every wait polls with a deadline and aborts the communicator when it passes.
class NcclRootCommunicator final : public RootCommunicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclRootCommunicator>> Create(const NcclLibrary* nccl,
                                                                      int device, int world_size);
  ~NcclRootCommunicator() override;

  const std::string& unique_id() const override { return unique_id_; }
  int world_size() const override { return world_size_; }
  absl::StatusOr<uint64_t> StartBroadcastFrom(SlotMemory& slot, const void* base,
                                              const std::vector<BroadcastPiece>& pieces,
                                              absl::Time deadline) override;
  absl::StatusOr<WireTiming> WaitBroadcast(uint64_t ticket, absl::Time deadline) override;
  absl::Status WarmUpAllReduce(absl::Time deadline) override;
  void Abort(absl::string_view reason) override;
  std::string Describe() const override;

 private:
  NcclRootCommunicator(const NcclLibrary* nccl, int device, int world_size, std::string id)
      : nccl_(nccl), device_(device), world_size_(world_size), unique_id_(std::move(id)) {}
  struct Ticket {
    std::shared_ptr<TimingEvent> start;
    std::shared_ptr<TimingEvent> end;
    std::shared_ptr<TimingEvent> previous_end;  // null for the first broadcast
  };
  // Polls the communicator until `done` (an event, or the init when null) has completed; what =
  // what is being waited for.
  absl::Status WaitFor(cudaEvent_t done, absl::Time deadline, absl::string_view what);
  absl::Status WaitReady(absl::Time deadline);

  const NcclLibrary* nccl_;
  const int device_;
  const int world_size_;
  const std::string unique_id_;
  std::unique_ptr<Stream> stream_;
  std::mutex comm_mu_;
  ncclComm_t comm_ = nullptr;
  bool ready_ = false;
  CommAbortState abort_;
  std::mutex broadcast_mu_;  // orders StartBroadcastFrom calls; guards the two fields below
  uint64_t next_ticket_ = 0;
  std::shared_ptr<TimingEvent> last_end_;
  // Its own lock: WaitBroadcast must not queue behind a StartBroadcast that waits for the
  // communicator's first connection (WaitReady), which can take until the deadline.
  std::mutex tickets_mu_;
  std::map<uint64_t, Ticket> tickets_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_NCCL_COMMUNICATOR_H_
