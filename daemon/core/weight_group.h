#ifndef WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_
#define WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/bucket_planner.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/engine_group_name.h"
#include "daemon/core/group_membership.h"
#include "daemon/core/group_record.h"
#include "daemon/core/group_recovery.h"
#include "daemon/core/group_spec.h"
#include "daemon/core/trainer_feeds.h"
#include "daemon/core/transport.h"
#include "daemon/core/transport_kind.h"
#include "daemon/core/weights_check.h"

namespace wsync {

// forming -> ready <-> updating; any failure of the transport -> broken (re-formed on the next
// update); destroy -> destroyed.
enum class GroupState { kForming, kReady, kUpdating, kBroken, kDestroyed };
absl::string_view GroupStateName(GroupState state);

struct GroupOptions {
  TransportOptions transport;
  AdapterTimeouts timeouts;
  // This wsyncd's incarnation id, fresh at each start: the engines know a group as
  // "<name>.<incarnation>.<token>" (EngineGroupName; "" keeps the bare name, for tests).
  std::string incarnation;
  // How often a quorum group asks the engines it went without, in the background, whether they
  // answer again (the next update then forms the group again with them).
  absl::Duration left_out_check_interval = absl::Seconds(5);
};

struct EngineRow {
  std::string group;
  std::string kind;
  EngineEndpoint endpoint;
  EngineHealth health;
  // Why the engine waits, paused, for a complete update; empty when it does not.
  std::string needs_full_version;
  // Why the engine must be restarted before it can join again; empty when it need not.
  std::string needs_restart;
  // Why its group is broken (a failed formation, or a failed bucket): it forms again before its
  // next update. Empty while the group is forming, ready or updating.
  std::string group_error;
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
  // Engine URL -> why it waits, paused, for a complete update.
  std::map<std::string, std::string> needs_full_version;
};

// One weight group: its state machine, its engines' adapters (the lifecycle calls go to all of
// them at once) and its transport, which moves the buckets. Thread-safe.
//
// With a store, the group keeps its record there (GroupRecord), written before the engines are
// asked to act: before they init the engine group, and before they are paused for an update.
// An engine that may hold a mix of two versions (a wsyncd died while updating it) is never
// resumed on the side: not when an update fails or is aborted, only by a complete update or by
// ResumeEngines, an operator's call.
class WeightGroup {
 public:
  // Makes the adapters and the transport; refuses engines that lack the transport's data path.
  // `store` may be null (nothing is recorded). `previous` is the record an earlier wsyncd left for
  // this name: before this group first forms, the engines it names are asked to drop the engine
  // group it names, and its engines that an update left paused keep waiting for a full version.
  static absl::StatusOr<std::shared_ptr<WeightGroup>> Create(GroupSpec spec, Platform* platform,
                                                             GroupOptions options,
                                                             const GroupFactories& factories,
                                                             GroupStateStore* store = nullptr,
                                                             const GroupRecord* previous = nullptr);
  ~WeightGroup();

  // Probes every engine, then forms the transport.
  absl::Status Form();
  // Disbands the group at its engines and forgets its record.
  absl::Status Destroy();
  // Disbands the group at its engines and keeps its record, for the wsyncd that starts next.
  absl::Status Close();
  // Resumes generation on the engine at `url`, or (url empty) on every engine that waits for a
  // full version, with whatever versions it holds. Returns the URLs resumed.
  absl::StatusOr<std::vector<std::string>> ResumeEngines(const std::string& url);

  // Pauses every engine and marks it as waiting for a full version, `why` being the reason shown:
  // the version they hold must not be served (a relay's downstream whose upstream's update did
  // not land on enough nodes). Refused while an update runs. Pausing is best effort; the first
  // failure is returned, the marks stay.
  absl::Status HoldEngines(const std::string& why);

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
  // updating -> ready: records the version on every engine and resumes generation. An engine
  // that finished holds a full version again.
  // `data_deadline` bounds the transport's FinishBuckets; a failure there marks the group broken
  // and resumes the engines without recording the version.
  absl::Status FinishUpdate(const UpdateInfo& update, absl::Time data_deadline,
                            std::vector<EngineOutcome>* outcomes);
  // updating -> ready (or broken). An engine that a bucket of this update reached may hold part
  // of its version: it stays paused, waiting for a full version, and is named in `outcomes` (when
  // given). The others resume, best effort, unless they already wait for a full version.
  void AbortUpdate(const std::string& reason, std::vector<EngineOutcome>* outcomes = nullptr);

  // The engines a bucket of the open update was started towards (URLs).
  std::set<std::string> ReachedEngines() const;

  // The union of the engines' bucket rules: what the client's planner must obey.
  const BucketRules& bucket_rules() const { return bucket_rules_; }
  GroupSnapshot Snapshot() const;
  std::vector<EngineRow> ProbeEngines();
  // The engines a quorum group went without that answered their last background health check:
  // the next update forms the group again to take them back.
  std::set<std::string> AnsweringAgain() const;
  const GroupSpec& spec() const { return spec_; }
  // Declared by a trainer's session: kept so in its record (GroupRecord::trainer_declared).
  void SetTrainerDeclared();
  // The transport the spec names.
  const TransportKind& transport_kind() const { return *transport_kind_; }
  // Whether its transport is fed fastest in pull mode on every engine's data path
  // (TransportKind::pull_by_default).
  bool pull_preferred() const;
  // The trainer ranks an update needs, one per device (FeedsOf).
  const std::vector<TrainerFeed>& feeds() const { return feeds_; }

 private:
  WeightGroup(GroupSpec spec, std::string engine_group, std::vector<TrainerFeed> feeds,
              std::vector<std::unique_ptr<EngineAdapter>> adapters, GroupStateStore* store,
              Platform* platform, GroupFactories factories, TransportOptions transport_options);
  // A quorum group's background thread: every `interval` it asks the engines outside the
  // formation (and not backing off) for their health, off every update's path, so that an update
  // never waits for an engine that is down.
  void WatchLeftOut(absl::Duration interval);
  // Probes the engines at `candidates` (indexes into adapters_; empty: all) and forms the
  // transport over them. A quorum group leaves out those that fail the probe or the join (they
  // are set aside) while enough remain, making the transport again over the rest.
  absl::Status FormLocked(std::vector<size_t> candidates = {});
  // Makes the transport over the engines at `members`, renumbering their ranks from 1 in that
  // order, and releases the one before (disband it first where the engines hold it).
  absl::Status MakeTransportLocked(const std::vector<size_t>& members);
  // Gives the engines at `members` their ranks from 1, in that order, and every other engine 0.
  void NumberRanksLocked(const std::vector<size_t>& members);
  // Pauses the members and opens the update on each. A quorum group sets aside an engine that
  // fails either (a broadcast group then forms again without it); otherwise the first failure
  // is returned, with every engine resumed by the caller.
  absl::Status PauseMembersLocked(const UpdateInfo& update);
  // What the weights check after a commit found: per engine whether its weights differ, and
  // whether one that differs could not be paused (so it serves them).
  struct CommittedWeights {
    WeightsCheck check;
    std::vector<bool> differs;
    bool differing_serves = false;
  };
  // The commit's steps (weight_group_commit.cc). An engine's outcome of the update.
  EngineOutcome OutcomeOf(size_t i, absl::Status status) const;
  // Asks the members the update did not go without to commit it: one result per engine, those
  // left out saying why.
  std::vector<absl::Status> CommitOnEngines(const UpdateInfo& update);
  // Pauses the engines a committed update went without; a failed pause joins its result.
  void PauseMissed(const std::vector<size_t>& missed, std::vector<absl::Status>* results);
  // Closes the update at the engines a failed commit leaves holding part of it (or a version
  // the group did not take), pauses them and marks them as waiting for a full version.
  void PausePartial(const UpdateInfo& update, const std::vector<size_t>& partial,
                    const std::vector<absl::Status>& results, size_t committed);
  // Asks the engines that committed (indexes) for their checksums and compares them; notes each
  // one's outcome, and pauses those whose weights differ.
  CommittedWeights CheckCommittedWeights(const UpdateInfo& update,
                                         const std::vector<size_t>& committed,
                                         std::vector<EngineOutcome>* outcomes,
                                         size_t first_outcome);
  // A group whose updates need fewer than all of its engines (spec_.quorum).
  bool quorum_group() const { return membership_.quorum(); }
  size_t engines_needed() const { return membership_.needed(); }
  std::vector<EngineAdapter*> AdaptersAt(const std::vector<size_t>& indexes) const;
  std::vector<std::string> UrlsAt(const std::vector<size_t>& indexes) const;
  absl::Status DestroyLocked(bool forget);
  void MarkBroken(const absl::Status& status);
  // Takes what an earlier wsyncd's record says of this group: its last version, the engines that
  // wait for a full version, and the engine group its engines are to drop before this one forms.
  void TakeOver(const GroupRecord& previous, Platform* platform, const GroupOptions& options,
                const GroupFactories& factories);
  // Writes the group's record; OK without a store.
  absl::Status PersistLocked();
  // The adapters of the engines that do not wait for a full version.
  std::vector<EngineAdapter*> UnflaggedLocked() const;
  // Marks the engine at adapters_[i] as waiting, paused, for a full version because the open
  // update reached it and did not commit, and names it in `outcomes` (when given).
  void MarkPartialLocked(size_t i, const std::string& why, std::vector<EngineOutcome>* outcomes);

  const GroupSpec spec_;
  const TransportKind* transport_kind_ = nullptr;  // set by Create, never null after
  const std::vector<TrainerFeed> feeds_;
  const std::vector<std::unique_ptr<EngineAdapter>> adapters_;
  const std::vector<EngineAdapter*> adapter_ptrs_;
  GroupStateStore* const store_;
  // What a transport is made from, again whenever a quorum group's members change.
  Platform* const platform_;
  const GroupFactories factories_;
  const TransportOptions transport_options_;
  BucketRules bucket_rules_;
  // Made by MakeTransportLocked: at Create, and again when a quorum group forms with other
  // members. Its failure hook calls back into this group.
  std::unique_ptr<Transport> transport_;
  mutable std::mutex mu_;
  GroupState state_ = GroupState::kForming;
  // The engines the transport is formed over, and those a quorum group goes without.
  GroupMembership membership_;
  // What the wsyncd before this one left, and what this one records for the next.
  GroupRecovery recovery_;
  std::thread watcher_;
  std::mutex watcher_mu_;
  std::condition_variable watcher_cv_;
  bool watcher_stop_ = false;  // guarded by watcher_mu_
  // From BeginUpdate until FinishUpdate or AbortUpdate, whatever the state: a bucket that failed
  // breaks the group while the update's threads still hold its transport, which must stay formed
  // under them until the update ends.
  bool update_open_ = false;
  bool trainer_declared_ = false;
  std::string last_version_;
  std::string error_;
  uint64_t updates_ = 0;
  // The update the engines were paused for, as recorded; version empty when none.
  UpdateInfo open_update_;
  // Engine URLs that a bucket of the open update was started towards: each may hold part of its
  // version, so if the update does not commit it must not serve what it holds.
  std::set<std::string> reached_;
  // Engine URL -> why it waits for a full version.
  std::map<std::string, std::string> needs_full_;
  // The name the engines know this group by (EngineGroupName).
  const std::string engine_group_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_WEIGHT_GROUP_H_
