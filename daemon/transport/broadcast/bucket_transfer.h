#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_BUCKET_TRANSFER_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_BUCKET_TRANSFER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/transport.h"
#include "daemon/transport/http/bucket_answers.h"
#include "daemon/transport/http/update_channel.h"

namespace wsync {

// One bucket on its way to a group's engines. Start launches it at once, in the caller's thread:
// it writes the bucket's update request to every engine's UpdateChannel, then queues the
// broadcast on rank 0. The update's sender starts buckets in order, so requests reach each
// engine's connection, and broadcasts rank 0's stream, in bucket order; each channel's engine
// takes its requests in the order written, so request k+1 waits at the engine, not in wsyncd,
// while bucket k is on the wire, and broadcasts queue back to back.
//
// A broadcast is queued only once its requests are written: a queued broadcast then waits for
// nothing but the engines' own progress. Queued earlier, it would sit on the GPU waiting for
// engines that only wsyncd's host progress can send it, and any device-synchronising CUDA call in
// wsyncd would then stall everything until the deadline.
//
// The engine answers only after it has received the bytes. A failed answer, or a request that
// cannot be written, aborts the collective at once rather than letting a queued broadcast run
// into the deadline.
// One formation of a broadcast group, as its buckets share it: rank 0's communicator, and whether
// any of its buckets has failed. After a failure no later bucket may reach an engine: the engines
// that took the failed bucket's request are out of step until the group forms again. Buckets hold
// it, so the communicator outlives every bucket that may still touch it.
struct FormedCollective {
  explicit FormedCollective(std::shared_ptr<RootCommunicator> c) : comm(std::move(c)) {}
  // Closes the group to later buckets and aborts what runs on the communicator.
  void Fail(absl::string_view why) {
    latch.Trip();
    comm->Abort(why);
  }
  const std::shared_ptr<RootCommunicator> comm;
  FailureLatch latch;
};

class BucketTransfer final : public BucketHandle {
 public:
  // Called once with the combined error when the bucket fails.
  using FailureHook = std::function<void(const absl::Status&)>;
  // What the rendezvous store saw, when it explains a failure (empty when it looks sound).
  using Diagnosis = std::function<std::string()>;

  // `channels` holds one channel per adapter, in the same order. A launch that fails (a request
  // not written, a broadcast not queued) aborts the collective and is reported by WaitReusable; see
  // launched().
  // `source` is the bucket's one source: its slot (ordering the broadcast after the producer's
  // writes), and `base`, when not null, the memory the broadcast reads instead.
  static absl::StatusOr<std::unique_ptr<BucketTransfer>> Start(
      const std::vector<EngineAdapter*>& adapters,
      const std::vector<std::shared_ptr<UpdateChannel>>& channels,
      std::shared_ptr<FormedCollective> collective, const BucketSource& source,
      const BucketManifest& manifest, const BucketContext& context, const std::string& group_name,
      std::string rank_map, absl::Time deadline, FailureHook on_failure, Diagnosis diagnose = {});
  ~BucketTransfer() override;

  // True when every request was written and the broadcast queued.
  bool launched() const override { return launch_status_.ok(); }
  // Waits until the bucket has left rank 0: its slot may be refilled.
  absl::StatusOr<WireTiming> WaitReusable() override;
  absl::Time requests_written_at() const override;
  absl::Time answered_at() const override { return answered_at_; }
  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes) override;

 private:
  BucketTransfer(std::vector<EngineAdapter*> adapters,
                 std::vector<std::shared_ptr<UpdateChannel>> channels,
                 std::shared_ptr<FormedCollective> collective, std::string rank_map,
                 absl::Time deadline, FailureHook on_failure, Diagnosis diagnose);
  // Writes every engine's request, then queues the broadcast; the first failure stops it.
  absl::Status Launch(const BucketSource& source, const std::vector<BroadcastPiece>& pieces,
                      const std::vector<EngineRequest>& requests);
  // Ends the update's requests early; only once the broadcast has failed (the bytes will never
  // arrive), which fails the update anyway.
  void Cancel();

  const std::vector<EngineAdapter*> adapters_;
  const std::vector<std::shared_ptr<UpdateChannel>> channels_;
  const std::shared_ptr<FormedCollective> collective_;
  RootCommunicator* const comm_;  // collective_->comm
  const std::string rank_map_;
  const absl::Time deadline_;
  FailureHook on_failure_;
  Diagnosis diagnose_;
  // Set by the launch, before Start returns.
  absl::Status launch_status_;
  uint64_t ticket_ = 0;
  std::vector<std::shared_ptr<ChannelCall>> calls_;  // per engine: its request, once written
  std::vector<absl::Status> not_written_;            // per engine: why its request was not
  absl::Status sent_;
  absl::Time sent_failed_at_ = absl::InfiniteFuture();
  bool waited_sent_ = false;
  bool waited_answers_ = false;
  absl::Time answered_at_ = absl::InfinitePast();
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_BUCKET_TRANSFER_H_
