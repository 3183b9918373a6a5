#ifndef WSYNC_DAEMON_CORE_DAEMON_CORE_H_
#define WSYNC_DAEMON_CORE_DAEMON_CORE_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/network_allow_list.h"
#include "daemon/core/buffer_pool.h"
#include "daemon/core/group_record.h"
#include "daemon/core/session_registry.h"
#include "daemon/core/transport.h"
#include "daemon/core/update_history.h"
#include "daemon/core/update_observer.h"
#include "daemon/core/update_run.h"
#include "daemon/core/weight_group.h"

namespace wsync {

struct DaemonOptions {
  std::string mode = "host";
  uint32_t slots_per_device = 2;
  uint64_t slot_bytes = 512ull << 20;
  // Colocated training wants its GPU memory back between updates: when the last session on a
  // device closes (or expires), free that device's slots, and make them anew for the next
  // session there. Off by default: persistent slots make every later hand-off cheap (no
  // allocation, no new IPC handle for the trainer and engines to open).
  bool release_idle_slots = false;
  int max_device = 15;
  absl::Duration lease = absl::Seconds(60);
  absl::Duration bucket_timeout = absl::Seconds(120);
  // "auto": each group's transport says (TransportKind::checksum_by_default: crc32 where the
  // bytes cross a wire, crc32-sampled where the engines read them on the GPU that filled them);
  // "crc32": trainers checksum every byte of every bucket they fill and wsyncd verifies it before
  // sending; "none": neither (no protection from a trainer-side copy bug).
  std::string checksum = "auto";
  // What wsyncd found about GPU sharing at startup (GpuSharing), shown by `wsyncctl status`.
  std::string gpu_sharing = "n/a (host mode)";
  size_t history_limit = 256;
  // The most groups one trainer session may declare (Trainer.DeclareGroup).
  uint32_t max_groups_per_session = 8;
  GroupOptions group;
  // The hosts a group's engines may be at (config "engine_networks"): wsyncd sends requests to
  // whatever URL a group names, so a group elsewhere is refused before any request is made.
  NetworkAllowList engine_networks = NetworkAllowList::Loopback();
  // How engine host names are resolved for that check.
  HostResolver resolve_host = ResolveHost;
  // Hears every bucket and update as they end (metrics, logs); null: nobody. Outlives the core.
  UpdateObserver* observer = nullptr;
};

struct SessionView {
  std::string id;
  std::string source_tag;  // see Session::source_tag
  int device = 0;
  std::vector<SlotMemory*> slots;
  absl::Duration lease;
};

struct DaemonStatusView {
  std::string mode;
  absl::Duration uptime;
  bool draining = false;
  size_t sessions = 0;
  size_t groups = 0;
  size_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t committed = 0;
  uint64_t failed = 0;
  uint64_t bytes_sent = 0;
  absl::Time last_commit = absl::InfinitePast();
  // The devices wsyncd serves, by GPU UUID (host mode: its stand-ins), and whether they answer.
  std::vector<std::string> device_uuids;
  absl::Status devices;
  // Each NCCL library loaded, with its version.
  std::vector<std::pair<std::string, std::string>> nccl_libraries;
};

struct DrainResult {
  uint32_t waited = 0;
  bool drained = false;
};

// Everything the gRPC services call into. Thread-safe.
class DaemonCore {
 public:
  // `factories` make each group's engine adapters and transport. `state` (may be null) keeps the
  // groups' records for the wsyncd that starts after this one (see GroupRecord).
  DaemonCore(std::unique_ptr<Platform> platform, DaemonOptions options, GroupFactories factories,
             std::unique_ptr<GroupStateStore> state = nullptr);
  ~DaemonCore();

  absl::StatusOr<SessionView> OpenSession(int device, const std::string& client_name);
  absl::Status KeepAlive(const std::string& session_id);
  absl::Status CloseSession(const std::string& session_id);
  // Ids of the sessions open now.
  std::vector<std::string> SessionIds() const;
  // The session's trainer is gone (its hold call ended without CloseSession): closes the session
  // as soon as no update of it runs (its update stream ends too and aborts it), within the lease.
  void CloseDisconnectedSession(const std::string& session_id);
  // Drops the session's pull-mode mappings (each closes once no bucket still copies from it);
  // returns how many there were.
  absl::StatusOr<size_t> ReleaseSources(const std::string& session_id);
  // Leases the oversize slot (see BufferPool::LeaseOversize); returns its index and memory.
  absl::StatusOr<std::pair<uint32_t, SlotMemory*>> ReserveOversizeSlot(
      const std::string& session_id, uint64_t bytes);

  absl::StatusOr<GroupSnapshot> CreateGroup(const GroupSpec& spec);
  // A group of the session's own (Trainer.DeclareGroup): created and formed; as it is when the
  // session declared the same before (second: false); formed anew when it declared it with other
  // engines or options (refused while an update of it runs). A group of the config's or an
  // operator's, or another session's, is ALREADY_EXISTS; one a wsyncd before this one kept for
  // its trainer (GroupRecord::trainer_declared) is taken by the first session that declares it.
  // More than max_groups_per_session is RESOURCE_EXHAUSTED. The group ends with the session.
  absl::StatusOr<std::pair<GroupSnapshot, bool>> DeclareSessionGroup(const std::string& session_id,
                                                                     const GroupSpec& spec);
  // Ends a group the session declared; NOT_FOUND for any other.
  absl::Status ForgetSessionGroup(const std::string& session_id, const std::string& name);
  // Registers a group without contacting its engines (config-declared groups form in background).
  absl::Status DeclareGroup(const GroupSpec& spec);
  // Brings up the groups at start: the configured ones, and the recorded ones (an earlier wsyncd's
  // records) that the config does not name. A group with a record first has the engines the
  // record names drop the engine group it names, and keeps its engines' waits for a full version.
  // A configured group that cannot be declared is an error ("config group 'NAME': ..."); a
  // recorded one is logged and skipped, its record left for the operator.
  absl::Status Recover(const std::vector<GroupSpec>& configured,
                       const std::vector<GroupRecord>& recorded);
  std::vector<GroupSnapshot> ListGroups() const;
  absl::StatusOr<GroupSnapshot> GetGroup(const std::string& name) const;
  absl::Status DestroyGroup(const std::string& name);
  std::vector<EngineRow> ListEngines();
  // The engines of one group only (each asked, as ListEngines does); NOT_FOUND without it.
  absl::StatusOr<std::vector<EngineRow>> ListEngines(const std::string& group);
  // WeightGroup::HoldEngines on `group`.
  absl::Status HoldEngines(const std::string& group, const std::string& why);
  // An operator's call: resumes generation on a group's engine (url) or on every engine of the
  // group that waits for a full version (url empty), accepting the versions it holds.
  absl::StatusOr<std::vector<std::string>> ResumeEngines(const std::string& group,
                                                         const std::string& url);

  // Pull mode: maps the allocations a bucket announces (kept for the session) and resolves its
  // tensors to pieces of them.
  absl::StatusOr<PulledSources> ResolveSources(const std::string& session_id,
                                               const std::vector<AllocationAnnounce>& announced,
                                               const std::vector<TensorSourceRef>& sources,
                                               const BucketManifest& manifest);

  // Begins an update of `group` to `version` from the session's device, or joins the one that
  // another trainer rank of a group fed from several GPUs (a colocated TP group) began with the
  // same version. `tp_rank` (-1: not given) must then be the feed's position in the group's
  // feeds, a check that the trainer's rank sits on the GPU the group expects.
  absl::StatusOr<std::unique_ptr<UpdateMember>> BeginUpdate(const std::string& session_id,
                                                            const std::string& group,
                                                            const std::string& version,
                                                            UpdateEvents* events, int tp_rank = -1);

  std::vector<SlotRow> ListBuffers() const { return pool_.Snapshot(); }
  std::vector<DeviceMemoryRow> ListDeviceMemory() const { return pool_.Devices(); }
  // An operator's call: frees the slots of `device` (every device when negative) that no session
  // holds, so training may use the memory; the next session there makes them anew.
  ReleaseResult ReleaseBuffers(int device) { return pool_.ReleaseIdle(device); }
  std::vector<UpdateRecord> ListUpdates(size_t limit) const { return history_.Latest(limit); }
  DaemonStatusView Status() const;
  bool draining() const { return draining_; }
  // Updates begun and not yet ended.
  int running_updates() const {
    std::lock_guard<std::mutex> lock(mu_);
    return running_updates_;
  }
  // The updates running now, as far as each has come.
  std::vector<UpdateProgressView> ListProgress() const;
  // Status() and what takes the platform longer to say: its devices and NCCL libraries.
  DaemonStatusView Diagnose() const;
  DrainResult Drain(absl::Duration timeout);
  // Ends a drain: sessions and updates are taken again. Returns whether wsyncd was draining.
  bool Undrain();
  const DaemonOptions& options() const { return options_; }
  const Platform& platform() const { return *platform_; }
  // For what joins collectives on this daemon's devices (a relay feed's pair).
  Platform* mutable_platform() { return platform_.get(); }

 private:
  // A colocated update ended: the pull-mode mappings of `session_id` close before its trainer
  // hears the result.
  void CloseSourcesAfterUpdate(const std::string& session_id);
  // Removes the session's pull-mode mappings from the table (null: none); they close when the
  // returned table and every bucket still reading them are gone.
  std::shared_ptr<SourceTable> TakeSourceTable(const std::string& session_id);
  void ReapLoop();
  // PERMISSION_DENIED naming the engine and engine_networks unless every engine's host is in it.
  absl::Status CheckEngineNetworks(const GroupSpec& spec) const;
  absl::Status DeclareWithRecord(const GroupSpec& spec, const GroupRecord* previous);
  // CreateGroup, marking the group a trainer's before it is first recorded.
  absl::StatusOr<GroupSnapshot> CreateAndForm(const GroupSpec& spec, bool trainer_declared);
  // Ends the groups the session declared: it ended.
  void EndSessionGroups(const std::string& session_id);
  std::shared_ptr<WeightGroup> FindGroup(const std::string& name) const;
  // Starts a new update of `group` fed first by `feed`.
  absl::StatusOr<std::shared_ptr<UpdateRun>> StartRun(const std::shared_ptr<WeightGroup>& group,
                                                      const Session& session, size_t feed,
                                                      const std::string& version,
                                                      UpdateEvents* events);
  // Where the trainer ranks of one group meet: the update they may join, while it runs. Its
  // mutex orders the ranks' begins, so two ranks never start two updates.
  struct JoinPoint {
    std::mutex mu;
    std::weak_ptr<UpdateRun> run;
  };

  std::unique_ptr<Platform> platform_;
  const DaemonOptions options_;
  const GroupFactories factories_;
  const absl::Time started_;
  BufferPool pool_;
  SessionRegistry sessions_;
  UpdateHistory history_;
  const std::unique_ptr<GroupStateStore> state_;

  mutable std::mutex mu_;
  // Pull mode's mappings of each session's trainer allocations (guarded by mu_).
  std::map<std::string, std::shared_ptr<SourceTable>> source_tables_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<WeightGroup>> groups_;
  // Group name -> the session that declared it; "" for one recovered from a trainer's record,
  // which the first session to declare it takes (guarded by mu_).
  std::map<std::string, std::string> group_owners_;
  // One declaration at a time: each may destroy and form a group.
  std::mutex declare_mu_;
  std::map<std::string, std::shared_ptr<JoinPoint>> join_points_;
  int running_updates_ = 0;
  uint64_t next_update_ = 1;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::thread reaper_;
  std::vector<std::thread> formers_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_DAEMON_CORE_H_
