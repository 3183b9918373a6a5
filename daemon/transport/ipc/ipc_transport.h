#ifndef WSYNC_DAEMON_TRANSPORT_IPC_IPC_TRANSPORT_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_IPC_TRANSPORT_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/transport.h"
#include "daemon/core/weight_group.h"
#include "daemon/transport/http/engine_channels.h"
#include "daemon/transport/ipc/checkpoint_engine_stream.h"
#include "daemon/transport/ipc/ipc_bucket.h"
#include "daemon/transport/ipc/stream_sockets.h"

namespace wsync {

// The colocated path: engines on the trainer's GPUs map wsyncd's slots through CUDA IPC (host
// mode: shared memory) and load each bucket from them inside their update request. There is no
// collective and no rendezvous: forming checks that wsyncd has a device on every engine rank's
// GPU (named by UUID in the group spec) and that the engines can take IPC requests.
//
// Zero copy: a bucket read in place (pull mode, laid out in one trainer allocation as it is sent)
// is named to the engines in that allocation, by the handle the trainer announced.
//
// Each TP rank's payload must name memory on its own GPU, so a group whose ranks span GPUs is fed
// by one trainer rank per GPU (the core joins their sessions into one update): a bucket has one
// source per device, and each rank's view is the source on that rank's device.
//
// Engines reach the bucket one of two ways, the same for all of a group's engines: one request
// per bucket carrying every rank's handles (DataPath::kCudaIpc), or one request per update that
// opens a stream, each rank mapping its buffer once and taking each bucket's metadata on its own
// socket (DataPath::kCudaIpcStream, CheckpointEngineStream).
class IpcTransport final : public Transport {
 public:
  explicit IpcTransport(TransportEnv env);
  ~IpcTransport() override;

  absl::Status Form() override;
  void Disband() override;
  void Release(absl::string_view why) override;
  // Engines hold nothing of an IPC group between requests: nothing to leave.
  std::vector<absl::Status> LeaveStale(const std::string& engine_group) override;
  absl::Status CheckFormed() const override;
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::StatusOr<std::unique_ptr<BucketHandle>> StartBucket(
      const std::vector<BucketSource>& sources, const BucketManifest& manifest,
      const BucketContext& context, absl::Time deadline) override;
  // Streams only: ends each engine's stream and waits for its answer.
  absl::Status FinishBuckets(absl::Time deadline) override;
  void EndUpdate(absl::string_view why) override;
  // Per-request groups with a quorum only: the engines dropped after a failed bucket.
  std::map<std::string, absl::Status> DroppedEngines() const override;
  // Engine ranks only: wsyncd takes no rank.
  uint32_t world_size() const override { return ranks_; }
  std::string rendezvous() const override { return ""; }
  std::string Describe() const override;

 private:
  const TransportEnv env_;
  uint32_t ranks_ = 0;
  std::vector<std::string> urls_;
  EngineChannels channels_;

  mutable std::mutex mu_;
  // Set by Form (RankFeedsOf); each engine's ranks' GPUs and wsyncd's devices there, in TP-rank
  // order.
  std::vector<std::vector<TrainerFeed>> gpus_;
  std::shared_ptr<IpcFormation> formation_;
  bool streamed_ = false;  // set by Form: the engines take DataPath::kCudaIpcStream
  StreamSockets sockets_;
  // The open update's streams, one per engine (streamed groups only).
  std::vector<std::shared_ptr<CheckpointEngineStream>> streams_;
  // The open update's dropped engines (per-request groups with a quorum; null otherwise). A
  // stream carries an engine's buckets to its end and fails the update as a whole instead.
  std::shared_ptr<EngineDrops> drops_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_IPC_TRANSPORT_H_
