#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_BROADCAST_TRANSPORT_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_BROADCAST_TRANSPORT_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/transport.h"
#include "daemon/transport/broadcast/bucket_transfer.h"
#include "daemon/transport/broadcast/rendezvous_strategy.h"
#include "daemon/transport/http/engine_channels.h"

namespace wsync {

// The disaggregated path: wsyncd is rank 0 of the engines' weight-update collective (NCCL on GPU
// nodes, the host collective in host mode, both behind the GPU seam's RootCommunicator) and
// broadcasts each bucket from its slot, paired with each engine's update request (see
// BucketTransfer). Engine ranks are numbered in the group's engine order from 1. A bucket's slot
// is reusable once its bytes have left rank 0.
class BroadcastTransport final : public Transport {
 public:
  BroadcastTransport(TransportEnv env, std::unique_ptr<RendezvousStrategy> rendezvous);
  ~BroadcastTransport() override;

  // How long Disband waits for rank 0's communicator to tear down (a finalize that its peers
  // complete takes well under a second; NcclRootCommunicator gives up on one after 5 s).
  static constexpr int kTeardownSeconds = 30;

  absl::Status Form() override;
  void Disband() override;
  void Release(absl::string_view why) override;
  std::vector<absl::Status> LeaveStale(const std::string& engine_group) override;
  absl::Status CheckFormed() const override;
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::StatusOr<std::unique_ptr<BucketHandle>> StartBucket(
      const std::vector<BucketSource>& sources, const BucketManifest& manifest,
      const BucketContext& context, absl::Time deadline) override;
  void EndUpdate(absl::string_view why) override;
  uint32_t world_size() const override { return world_size_; }
  std::string rendezvous() const override;
  std::vector<std::string> EnginesFailedToJoin() const override;
  std::string Describe() const override;

 private:
  void ReleaseLocked(absl::string_view why);
  // The rendezvous' explanation of a failed bucket, or "".
  std::string Diagnose() const;

  const TransportEnv env_;
  // The name the engines know the group by (env_.engine_group, or the spec's without one).
  const std::string engine_group_;
  uint32_t world_size_ = 1;
  std::string rank_map_;  // "rank 1 = URL, ranks 2-3 = URL"
  std::vector<std::string> urls_;
  // Shared with every transport kind's requests; cancelled when an update ends.
  EngineChannels channels_;

  mutable std::mutex mu_;
  std::unique_ptr<RendezvousStrategy> rendezvous_;
  // The current formation; buckets in flight share it, so it outlives them.
  std::shared_ptr<FormedCollective> collective_;
  std::vector<std::string> failed_to_join_;  // by the last Form
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_BROADCAST_TRANSPORT_H_
