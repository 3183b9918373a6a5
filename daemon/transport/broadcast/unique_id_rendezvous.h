#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_UNIQUE_ID_RENDEZVOUS_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_UNIQUE_ID_RENDEZVOUS_H_

#include <string>

#include "daemon/transport/broadcast/rendezvous_strategy.h"

namespace wsync {

// vLLM's store-less rendezvous (docs/engines/vllm.md, "The NCCL backend"): rank 0's ncclUniqueId
// travels in each engine's init request (init_info.nccl_unique_id_b64) and every rank enters
// ncclCommInitRank at once. There is no meeting point to watch: the warm-up all-reduce that follows
// the init, which completes only when every rank has joined, is the proof that they did, and an
// engine that restarts later is found by its health check or by the next broadcast's failure.
class UniqueIdRendezvous final : public RendezvousStrategy {
 public:
  absl::StatusOr<Rendezvous> Open(const std::string& group_name, const std::string& unique_id,
                                  uint32_t world_size) override {
    open_ = true;
    return Rendezvous{"", 0, world_size, group_name, RendezvousMode::kUniqueIdInInit, unique_id};
  }
  absl::Status WaitJoined(absl::Time) override { return absl::OkStatus(); }
  std::string Diagnose() const override { return ""; }
  absl::Status CheckJoined() const override {
    if (!open_) return absl::FailedPreconditionError("the group has no rendezvous");
    return absl::OkStatus();
  }
  std::string address() const override { return ""; }
  void Close() override { open_ = false; }
  RendezvousMode mode() const override { return RendezvousMode::kUniqueIdInInit; }

 private:
  bool open_ = false;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_UNIQUE_ID_RENDEZVOUS_H_
