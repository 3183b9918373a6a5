#ifndef WSYNC_DAEMON_CORE_BUCKET_TRANSFER_H_
#define WSYNC_DAEMON_CORE_BUCKET_TRANSFER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/request_gate.h"
#include "daemon/engines/engine_adapter.h"

namespace wsync {

struct EngineOutcome {
  std::string engine;
  absl::Status status;
};

// One bucket on its way to a group's engines: every engine's update request runs on its own
// thread, and both they and the broadcast wait for the bucket's request gate (see RequestGate).
// The broadcast is queued on rank 0 by whichever thread opens the gate, before Open returns, so
// the wire does not wait for a thread to wake. The engine answers only after it has received the
// bytes, so both must run at once; a failed request, or one that can never be posted, aborts the
// collective at once rather than letting a queued broadcast run into the deadline.
class BucketTransfer {
 public:
  // Called once with the combined error when the bucket fails.
  using FailureHook = std::function<void(const absl::Status&)>;
  // What the rendezvous store saw, when it explains a failure (empty when it looks sound).
  using Diagnosis = std::function<std::string()>;

  static absl::StatusOr<std::unique_ptr<BucketTransfer>> Start(
      const std::vector<EngineAdapter*>& adapters, RootCommunicator* comm, SlotMemory& slot,
      const void* base, BucketManifest manifest, const std::string& group_name,
      std::string rank_map, std::shared_ptr<RequestGate> gate, absl::Time deadline,
      FailureHook on_failure, Diagnosis diagnose = {});
  ~BucketTransfer();

  // Waits until the bucket has left rank 0: its slot may be refilled.
  absl::StatusOr<BroadcastTiming> WaitSent();
  // Waits until every engine's request has been written out (false if one never was). A later
  // request goes out only after this, so an engine cannot take it first.
  bool WaitRequestsWritten();
  // When the last engine request was fully written (after WaitRequestsWritten returned true).
  absl::Time requests_written_at() const;
  // When the last engine answered (after WaitAnswered).
  absl::Time answered_at() const { return answered_at_; }
  // Waits for every engine's answer. The error names the engines (or ranks) at fault.
  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes);

 private:
  // Ends the requests early; only once the broadcast has failed (the bytes will never arrive).
  void Cancel();
  BucketTransfer(std::vector<EngineAdapter*> adapters, RootCommunicator* comm,
                 BucketManifest manifest, std::string rank_map, std::shared_ptr<RequestGate> gate,
                 absl::Time deadline, FailureHook on_failure, Diagnosis diagnose);
  void PostRequests(const std::string& group_name);
  void JoinRequests();

  // The broadcast's start, done by the thread that decides the gate. Shared with that callback,
  // which may outlive a transfer dropped early (`dropped` then stops it).
  struct Launch {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool dropped = false;
    absl::Status status;  // why the broadcast was not queued
    uint64_t ticket = 0;
  };
  std::shared_ptr<Launch> launch_ = std::make_shared<Launch>();

  const std::vector<EngineAdapter*> adapters_;
  RootCommunicator* comm_;
  const BucketManifest manifest_;
  const std::string rank_map_;
  std::shared_ptr<RequestGate> gate_;
  const absl::Time deadline_;
  FailureHook on_failure_;
  Diagnosis diagnose_;
  absl::Status sent_;
  bool waited_sent_ = false;

  std::vector<absl::Status> results_;
  std::vector<absl::Time> answer_times_;  // when each engine's request ended
  absl::Time answered_at_ = absl::InfinitePast();
  std::vector<std::unique_ptr<HttpCallControl>> controls_;
  std::vector<std::thread> threads_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_BUCKET_TRANSFER_H_
