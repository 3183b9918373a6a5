#ifndef WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_TRANSPORT_H_
#define WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_TRANSPORT_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/transport.h"
#include "daemon/relay/relay_channel.h"
#include "daemon/transport/ipc/engine_drops.h"
#include "daemon/transport/relay/relay_deltas.h"

namespace wsync {

// The node relay's upstream side (docs/RELAY.md): a relay group's members are downstream
// wsyncds, each reached through its subscription stream (RelayBinding). Forming makes one 2-rank
// collective per member and stream (this wsyncd rank 0 on the stream's device, the downstream
// rank 1 on its own), so a member that fails is aborted alone and the others go on. A group with
// streams (several trainer ranks, each pushing its own part to its own device) sends each bucket
// from the device it was pushed to, on that device's pair: no device funnels another's bytes. A
// bucket is announced on each member's stream (tensors, CRC-32) and broadcast on its pair; the
// member answers once the bytes landed in one of its slots and went to its local group. Its
// engines' loads are the downstream's own business: the relay waits on them only when the
// downstream's slots are full.
//
// A member is dropped from the rest of an update (its pair aborted) where the group's quorum
// allows, as IPC engines are; otherwise its failure fails the bucket.
class RelayTransport final : public Transport {
 public:
  explicit RelayTransport(TransportEnv env);
  ~RelayTransport() override;

  absl::Status Form() override;
  void Disband() override { Release("the group was disbanded"); }
  void Release(absl::string_view why) override;
  // Downstreams hold no group of an earlier wsyncd's: their pairs end with its streams.
  std::vector<absl::Status> LeaveStale(const std::string& engine_group) override;
  absl::Status CheckFormed() const override;
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::StatusOr<std::unique_ptr<BucketHandle>> StartBucket(
      const std::vector<BucketSource>& sources, const BucketManifest& manifest,
      const BucketContext& context, absl::Time deadline) override;
  // Says what the update's buckets sent against their dense bytes (deltas).
  void EndUpdate(absl::string_view why) override;

  uint32_t world_size() const override;
  std::string rendezvous() const override { return ""; }
  std::vector<std::string> EnginesFailedToJoin() const override;
  std::map<std::string, absl::Status> DroppedEngines() const override;
  std::string Describe() const override;

  // One downstream as formed: its subscription and the pairs its buckets cross on, one per
  // stream (in the order of stream_devices()).
  struct Member {
    std::string url;
    std::shared_ptr<RelayChannel> channel;
    std::vector<std::unique_ptr<RootCommunicator>> pairs;
    // Aborts every pair: they carry nothing more, and the group forms again before its next
    // update. Thread-safe; the first reason is kept.
    void Break(absl::string_view why);
    // Why the pair was broken; "" while it is whole.
    std::string broken() const;

   private:
    mutable std::mutex mu_;
    std::string broken_;
  };

 private:
  // Joins one member: its pairs made here, one per stream, each joined by the downstream.
  absl::StatusOr<std::shared_ptr<Member>> Join(EngineAdapter& adapter);

  const TransportEnv env_;
  // The devices buckets are sent from, one stream each: the group's stream devices, or its
  // device alone.
  const std::vector<int> streams_;
  mutable std::mutex mu_;
  // Empty until formed; shared with the buckets in flight.
  std::vector<std::shared_ptr<Member>> members_;
  std::vector<std::string> failed_to_join_;
  std::shared_ptr<EngineDrops> drops_;  // the open update's
  // Made at the first Form and kept across the next ones: the base outlives a group forming
  // again.
  std::shared_ptr<RelayDeltas> deltas_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_TRANSPORT_H_
