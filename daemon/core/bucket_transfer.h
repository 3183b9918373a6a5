#ifndef WSYNC_DAEMON_CORE_BUCKET_TRANSFER_H_
#define WSYNC_DAEMON_CORE_BUCKET_TRANSFER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/request_gate.h"
#include "daemon/engines/engine_adapter.h"
#include "daemon/engines/update_channel.h"

namespace wsync {

struct EngineOutcome {
  std::string engine;
  absl::Status status;
};

// One bucket on its way to a group's engines. Its launch waits for the bucket's gate: it writes
// the bucket's update request to every engine's UpdateChannel, then queues the broadcast on rank
// 0, then opens `successor`, so the next bucket's launch follows at once in the same thread when
// that bucket is ready. Each channel's engine takes its requests in the order written, so request
// k+1 waits at the engine, not in wsyncd, while bucket k is on the wire, and broadcasts queue back
// to back on rank 0's stream.
//
// A broadcast is queued only once its requests are written: a queued broadcast then waits for
// nothing but the engines' own progress. (Queued earlier, it would sit on the GPU waiting for
// engines that only wsyncd's host progress can send it, and a device-synchronising CUDA call in
// wsyncd meanwhile would stall everything until the deadline, as seen on H200.)
//
// The engine answers only after it has received the bytes. A failed answer, or a request that
// cannot be written, aborts the collective at once rather than letting a queued broadcast run
// into the deadline.
class BucketTransfer {
 public:
  // Called once with the combined error when the bucket fails.
  using FailureHook = std::function<void(const absl::Status&)>;
  // What the rendezvous store saw, when it explains a failure (empty when it looks sound).
  using Diagnosis = std::function<std::string()>;

  // `channels` holds one channel per adapter, in the same order.
  static absl::StatusOr<std::unique_ptr<BucketTransfer>> Start(
      const std::vector<EngineAdapter*>& adapters,
      const std::vector<std::shared_ptr<UpdateChannel>>& channels, RootCommunicator* comm,
      SlotMemory& slot, const void* base, BucketManifest manifest, const std::string& group_name,
      std::string rank_map, std::shared_ptr<RequestGate> gate,
      std::shared_ptr<RequestGate> successor, absl::Time deadline, FailureHook on_failure,
      Diagnosis diagnose = {});
  ~BucketTransfer();

  // Waits until the bucket has left rank 0: its slot may be refilled.
  absl::StatusOr<BroadcastTiming> WaitSent();
  // When the last engine request was fully written (InfinitePast unless all were).
  absl::Time requests_written_at() const;
  // When the last engine answered (after WaitAnswered).
  absl::Time answered_at() const { return answered_at_; }
  // Waits for every engine's answer. The error names the engines (or ranks) at fault.
  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes);

 private:
  // Ends the update's requests early; only once the broadcast has failed (the bytes will never
  // arrive), which fails the update anyway.
  void Cancel();
  BucketTransfer(std::vector<EngineAdapter*> adapters,
                 std::vector<std::shared_ptr<UpdateChannel>> channels, RootCommunicator* comm,
                 BucketManifest manifest, std::string rank_map, std::shared_ptr<RequestGate> gate,
                 absl::Time deadline, FailureHook on_failure, Diagnosis diagnose);

  // The launch, done by the thread that decides the gate. Shared with that callback, which may
  // outlive a transfer dropped early (`dropped` then stops it).
  struct Launch {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool dropped = false;
    absl::Status status;  // why the broadcast was not queued
    uint64_t ticket = 0;
    // Per engine: its request in flight, or why it was not written.
    std::vector<std::shared_ptr<ChannelCall>> calls;
    std::vector<absl::Status> not_written;
  };
  std::shared_ptr<Launch> launch_ = std::make_shared<Launch>();

  const std::vector<EngineAdapter*> adapters_;
  const std::vector<std::shared_ptr<UpdateChannel>> channels_;
  RootCommunicator* comm_;
  const BucketManifest manifest_;
  const std::string rank_map_;
  std::shared_ptr<RequestGate> gate_;
  const absl::Time deadline_;
  FailureHook on_failure_;
  Diagnosis diagnose_;
  absl::Status sent_;
  absl::Time sent_failed_at_ = absl::InfiniteFuture();
  bool waited_sent_ = false;
  bool waited_answers_ = false;
  absl::Time answered_at_ = absl::InfinitePast();
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_BUCKET_TRANSFER_H_
