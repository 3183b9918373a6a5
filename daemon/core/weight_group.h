#ifndef WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_
#define WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/bucket_planner.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/group_spec.h"
#include "daemon/core/transport.h"

namespace wsync {

// forming -> ready <-> updating; any failure of the transport -> broken (re-formed on the next
// update); destroy -> destroyed.
enum class GroupState { kForming, kReady, kUpdating, kBroken, kDestroyed };
absl::string_view GroupStateName(GroupState state);

struct GroupOptions {
  TransportOptions transport;
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
  BucketRules bucket_rules;
};

// The data path a transport needs every engine of its group to support.
DataPath DataPathOf(TransportKind transport);

// One weight group: its state machine, its engines' adapters (the lifecycle calls go to all of
// them at once) and its transport, which moves the buckets. Thread-safe.
class WeightGroup {
 public:
  // Makes the adapters and the transport; refuses engines that lack the transport's data path.
  static absl::StatusOr<std::shared_ptr<WeightGroup>> Create(GroupSpec spec, Platform* platform,
                                                             GroupOptions options,
                                                             const GroupFactories& factories);
  ~WeightGroup();

  // Probes every engine, then forms the transport.
  absl::Status Form();
  absl::Status Destroy();

  // ready -> updating (re-forming a broken group first), then pauses generation and opens the
  // update on every engine and on the transport.
  absl::Status BeginUpdate(const UpdateInfo& update);
  // Checks a bucket against the group's bucket rules and every engine's limits.
  absl::Status ValidateBucket(const BucketManifest& manifest) const;
  // Hands the bucket to the transport. If it fails, the group is broken and the handle's
  // outcomes name the engines at fault.
  absl::StatusOr<std::unique_ptr<BucketHandle>> StartBucket(
      const std::vector<BucketSource>& sources, const BucketManifest& manifest,
      const BucketContext& context, absl::Time deadline);
  // updating -> ready: records the version on every engine and resumes generation.
  absl::Status FinishUpdate(const UpdateInfo& update, std::vector<EngineOutcome>* outcomes);
  // updating -> ready (or broken): resumes generation, best effort.
  void AbortUpdate(const std::string& reason);

  // The union of the engines' bucket rules: what the client's planner must obey.
  const BucketRules& bucket_rules() const { return bucket_rules_; }
  GroupSnapshot Snapshot() const;
  std::vector<EngineRow> ProbeEngines();
  const GroupSpec& spec() const { return spec_; }

 private:
  WeightGroup(GroupSpec spec, std::vector<std::unique_ptr<EngineAdapter>> adapters);
  absl::Status FormLocked();
  void MarkBroken(const absl::Status& status);

  const GroupSpec spec_;
  const std::vector<std::unique_ptr<EngineAdapter>> adapters_;
  const std::vector<EngineAdapter*> adapter_ptrs_;
  BucketRules bucket_rules_;
  // Set once by Create; its failure hook calls back into this group.
  std::unique_ptr<Transport> transport_;

  mutable std::mutex mu_;
  GroupState state_ = GroupState::kForming;
  // From BeginUpdate until FinishUpdate or AbortUpdate, whatever the state: a bucket that failed
  // breaks the group while the update's threads still hold its transport, which must stay formed
  // under them until the update ends.
  bool update_open_ = false;
  std::string last_version_;
  std::string error_;
  uint64_t updates_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_
