#ifndef WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_
#define WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/bucket_transfer.h"
#include "daemon/engines/engine_adapter.h"
#include "daemon/rendezvous/tcp_store_server.h"

namespace wsync {

// forming -> ready <-> updating; any failure of the collective -> broken (re-formed on the next
// update); destroy -> destroyed.
enum class GroupState { kForming, kReady, kUpdating, kBroken, kDestroyed };
absl::string_view GroupStateName(GroupState state);

struct EngineSpec {
  std::string url;
  uint32_t ranks = 1;
  bool operator==(const EngineSpec&) const = default;
};

struct GroupSpec {
  std::string name;
  EngineKind kind = EngineKind::kSglang;
  std::vector<EngineSpec> engines;
  int device = 0;
  BucketFormat format = BucketFormat::kFlattened;
  bool operator==(const GroupSpec&) const = default;
};

struct GroupOptions {
  std::string bind_address = "0.0.0.0";
  std::string advertise_address = "127.0.0.1";
  absl::Duration registration_timeout = absl::Seconds(10);
  AdapterTimeouts timeouts;
};

struct EngineRow {
  std::string group;
  EngineEndpoint endpoint;
  EngineHealth health;
};

struct GroupSnapshot {
  GroupSpec spec;
  GroupState state = GroupState::kForming;
  uint32_t world_size = 0;
  std::vector<EngineEndpoint> endpoints;
  std::string rendezvous;
  std::string last_version;
  std::string error;
  uint64_t updates = 0;
};

absl::Status ValidateGroupSpec(const GroupSpec& spec);

class WeightGroup {
 public:
  WeightGroup(GroupSpec spec, Platform* platform, GroupOptions options);
  ~WeightGroup();

  // Starts a fresh store and communicator, publishes the unique id and asks every engine to join.
  absl::Status Form();
  absl::Status Destroy();

  // ready -> updating (re-forming a broken group first), then pauses generation.
  absl::Status BeginUpdate();
  absl::Status ValidateBucket(const BucketManifest& manifest) const;
  // Writes every engine's update request for the bucket and queues the broadcast of its bytes
  // (in the slot, or at `base` when a trainer allocation holds them laid out as the bucket); see
  // BucketTransfer. If the transfer fails the collective is aborted, the group is broken, and the
  // transfer's outcomes name the engines at fault.
  absl::StatusOr<std::unique_ptr<BucketTransfer>> StartBucket(SlotMemory& slot, const void* base,
                                                              const BucketManifest& manifest,
                                                              absl::Time deadline);
  // updating -> ready: records the version on every engine and resumes generation.
  absl::Status FinishUpdate(const std::string& version, std::vector<EngineOutcome>* outcomes);
  // updating -> ready (or broken): resumes generation, best effort.
  void AbortUpdate(const std::string& reason);

  GroupSnapshot Snapshot() const;
  std::vector<EngineRow> ProbeEngines();
  const GroupSpec& spec() const { return spec_; }
  // The store key engines' ProcessGroupNCCL reads the id from ("/G/G//cuda//0").
  static std::string UniqueIdKey(const std::string& group_name);

 private:
  absl::Status FormLocked();
  void TearDownLocked();
  // Asks every engine to drop the group while rank 0's communicator is finalized.
  void DestroyOnEnginesLocked();
  std::vector<absl::Status> OnEngines(const std::function<absl::Status(EngineAdapter&)>& fn);
  absl::Status WaitForRegistration();
  void MarkBroken(const absl::Status& status);
  // Cancels the update's channels (mu_ held; their callbacks take no group lock).
  void CloseChannelsLocked(absl::string_view why);
  // What the group's rendezvous store saw (which engine processes connected and fetched the id),
  // or "" when it saw nothing wrong.
  std::string StoreReport() const;

  const GroupSpec spec_;
  Platform* platform_;
  const GroupOptions options_;
  uint32_t world_size_ = 1;
  std::vector<std::unique_ptr<EngineAdapter>> adapters_;
  std::vector<EngineAdapter*> adapter_ptrs_;
  std::string rank_map_;  // "rank 1 = URL, ranks 2-3 = URL"

  mutable std::mutex mu_;
  GroupState state_ = GroupState::kForming;
  std::unique_ptr<TcpStoreServer> store_;
  std::unique_ptr<RootCommunicator> comm_;
  // The update's bucket requests, one keep-alive connection per engine (adapters_ order); made by
  // BeginUpdate, cancelled when the update ends or the communicator goes (their answers may abort
  // it).
  std::vector<std::shared_ptr<UpdateChannel>> channels_;
  std::string last_version_;
  std::string error_;
  uint64_t updates_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_
