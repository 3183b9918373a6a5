#include "daemon/core/daemon_core.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/transport_kind.h"

namespace wsync {
namespace {

// Logs one line for an ended update (UpdateRecord's state and the outcome's timings).
void LogUpdate(const UpdateRecord& record, const UpdateOutcome& outcome);

}  // namespace

DaemonCore::DaemonCore(std::unique_ptr<Platform> platform, DaemonOptions options,
                       GroupFactories factories, std::unique_ptr<GroupStateStore> state)
    : platform_(std::move(platform)),
      options_([&] {
        // Adapters see the bucket deadline through their timeouts.
        options.group.timeouts.bucket = options.bucket_timeout;
        return std::move(options);
      }()),
      factories_(std::move(factories)),
      started_(absl::Now()),
      pool_(platform_.get(), options_.slots_per_device, options_.slot_bytes),
      sessions_(options_.lease),
      history_(options_.history_limit),
      state_(std::move(state)) {
  reaper_ = std::thread([this] { ReapLoop(); });
}

DaemonCore::~DaemonCore() {
  stopping_ = true;
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  for (auto& t : formers_) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  // Their records stay: the next wsyncd brings the groups back.
  for (auto& [name, group] : groups_) (void)group->Close();
}

void DaemonCore::ReapLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::seconds(1));
    lock.unlock();
    std::vector<Session> expired = sessions_.Expire(absl::Now());
    for (const Session& s : expired) {
      WSYNC_LOG(Info, "session ", s.id, " (", s.client_name, ") expired; its slots are free");
      pool_.Release(s.device, s.id);
      if (options_.release_idle_slots) (void)pool_.ReleaseIdle(s.device);
    }
    for (const Session& s : expired) EndSessionGroups(s.id);
    lock.lock();
    for (const Session& s : expired) source_tables_.erase(s.id);
  }
}

absl::StatusOr<SessionView> DaemonCore::OpenSession(int device, const std::string& client_name) {
  if (draining_) return absl::UnavailableError("wsyncd is draining; no new sessions");
  if (device < 0 || device > options_.max_device) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device, " is outside 0..", options_.max_device));
  }
  const std::string name = client_name.empty() ? "unnamed" : client_name;
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the client name", name, kMaxNameBytes));
  const std::string id = sessions_.NewId();
  const std::string tag = SessionRegistry::NewSourceTag();
  WSYNC_ASSIGN_OR_RETURN(std::vector<SlotMemory*> slots, pool_.Lease(device, id));
  sessions_.Add(id, tag, device, name, slots);
  WSYNC_LOG(Info, "session ", id, " opened by '", name, "' on device ", device);
  return SessionView{id, tag, device, std::move(slots), options_.lease};
}

absl::Status DaemonCore::KeepAlive(const std::string& session_id) {
  return sessions_.Touch(session_id).status();
}

std::vector<std::string> DaemonCore::SessionIds() const {
  std::vector<std::string> ids;
  for (const Session& s : sessions_.List()) ids.push_back(s.id);
  return ids;
}

absl::Status DaemonCore::CloseSession(const std::string& session_id) {
  WSYNC_ASSIGN_OR_RETURN(Session s, sessions_.Remove(session_id));
  pool_.Release(s.device, s.id);
  if (options_.release_idle_slots) (void)pool_.ReleaseIdle(s.device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    source_tables_.erase(s.id);
  }
  WSYNC_LOG(Info, "session ", s.id, " closed");
  EndSessionGroups(s.id);
  return absl::OkStatus();
}

void DaemonCore::CloseDisconnectedSession(const std::string& session_id) {
  const absl::Time deadline = absl::Now() + options_.lease;
  while (absl::Now() < deadline && !stopping_) {
    auto session = sessions_.Touch(session_id);
    if (!session.ok()) return;  // already closed
    if (!session->update_running) {
      WSYNC_LOG(Info, "session ", session_id, " (", session->client_name,
                "): its trainer went away; closing it");
      (void)CloseSession(session_id);
      return;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<size_t> DaemonCore::ReleaseSources(const std::string& session_id) {
  WSYNC_ASSIGN_OR_RETURN(Session s, sessions_.Touch(session_id));
  if (s.update_running) {
    // Its later buckets may name allocations it announced earlier, which must stay mapped.
    return absl::FailedPreconditionError(
        "an update of this session is running; release its sources after it ends");
  }
  std::shared_ptr<SourceTable> table = TakeSourceTable(session_id);
  if (table == nullptr) return 0;
  const size_t closed = table->mapped();
  WSYNC_LOG(Info, "session ", session_id, ": released ", closed, " trainer allocation mapping(s)");
  return closed;
}

std::shared_ptr<SourceTable> DaemonCore::TakeSourceTable(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = source_tables_.find(session_id);
  if (it == source_tables_.end()) return nullptr;
  std::shared_ptr<SourceTable> table = std::move(it->second);
  source_tables_.erase(it);
  return table;
}

void DaemonCore::CloseSourcesAfterUpdate(const std::string& session_id) {
  std::shared_ptr<SourceTable> table = TakeSourceTable(session_id);
  if (table == nullptr) return;
  // The last reference: the mappings close here, the buckets that read them being done.
  if (table->mapped() > 0) {
    WSYNC_LOG(Debug, "session ", session_id, ": closed ", table->mapped(),
              " trainer allocation mapping(s) at the end of a colocated update");
  }
}

absl::StatusOr<PulledSources> DaemonCore::ResolveSources(
    const std::string& session_id, const std::vector<AllocationAnnounce>& announced,
    const std::vector<TensorSourceRef>& sources, const BucketManifest& manifest) {
  WSYNC_ASSIGN_OR_RETURN(Session s, sessions_.Touch(session_id));
  std::shared_ptr<SourceTable> table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = source_tables_[session_id];
    if (!slot) slot = std::make_shared<SourceTable>(platform_.get(), s.device, s.source_tag);
    table = slot;
  }
  return table->Resolve(announced, sources, manifest);
}

std::shared_ptr<WeightGroup> DaemonCore::FindGroup(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = groups_.find(name);
  return it == groups_.end() ? nullptr : it->second;
}

absl::Status DaemonCore::CheckEngineNetworks(const GroupSpec& spec) const {
  absl::StatusOr<const TransportKind*> transport = TransportOf(spec);
  if (transport.ok() && !(*transport)->engines_speak_http()) return absl::OkStatus();
  for (const EngineSpec& e : spec.engines) {
    WSYNC_ASSIGN_OR_RETURN(HttpUrl url, ParseHttpUrl(e.url));
    absl::Status allowed = options_.engine_networks.Check(url.host, options_.resolve_host);
    if (!allowed.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("group '", spec.name, "': engine ", e.url,
                       " is not allowed by engine_networks: ", allowed.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status DaemonCore::DeclareGroup(const GroupSpec& spec) {
  return DeclareWithRecord(spec, nullptr);
}

absl::Status DaemonCore::DeclareWithRecord(const GroupSpec& spec, const GroupRecord* previous) {
  WSYNC_RETURN_IF_ERROR(ValidateGroupSpec(spec));
  WSYNC_RETURN_IF_ERROR(CheckEngineNetworks(spec));
  std::optional<GroupRecord> allowed;
  if (previous != nullptr) {
    // The earlier group's engines are asked to drop its engine group only where wsyncd may send
    // requests now.
    allowed = *previous;
    allowed->spec.engines.clear();
    for (const EngineSpec& e : previous->spec.engines) {
      GroupSpec one = previous->spec;
      one.engines = {e};
      if (absl::Status s = CheckEngineNetworks(one); s.ok()) {
        allowed->spec.engines.push_back(e);
      } else {
        WSYNC_LOG(Warning, s.message(), "; it is not asked to drop the group '",
                  previous->engine_group, "' an earlier wsyncd left");
      }
    }
    if (allowed->spec.engines.empty()) {
      allowed->engine_group.clear();
      allowed->stale_engine_groups.clear();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (groups_.count(spec.name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("group '", spec.name, "' exists"));
  }
  WSYNC_ASSIGN_OR_RETURN(
      std::shared_ptr<WeightGroup> group,
      WeightGroup::Create(spec, platform_.get(), options_.group, factories_, state_.get(),
                          allowed.has_value() ? &*allowed : nullptr));
  groups_[spec.name] = group;
  if (previous != nullptr && previous->trainer_declared) {
    // Its trainer's next session takes it by declaring it again.
    group->SetTrainerDeclared();
    group_owners_[spec.name] = "";
  }
  formers_.emplace_back([group] { (void)group->Form(); });
  return absl::OkStatus();
}

absl::Status DaemonCore::Recover(const std::vector<GroupSpec>& configured,
                                 const std::vector<GroupRecord>& recorded) {
  std::map<std::string, const GroupRecord*> records;
  for (const GroupRecord& r : recorded) records[r.spec.name] = &r;
  for (const GroupSpec& g : configured) {
    auto it = records.find(g.name);
    std::optional<GroupRecord> previous;
    if (it != records.end()) {
      previous = *it->second;
      // A group the config names is the config's, whoever declared it before.
      previous->trainer_declared = false;
      records.erase(it);
    }
    if (absl::Status s = DeclareWithRecord(g, previous.has_value() ? &*previous : nullptr);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("config group '", g.name, "': ", s.message()));
    }
  }
  // Groups created through the admin API come back as they were.
  for (const auto& [name, record] : records) {
    if (absl::Status s = DeclareWithRecord(record->spec, record); !s.ok()) {
      WSYNC_LOG(Error, "recorded group '", name, "' is not restored: ", s.message(),
                " (its record stays in the state directory)");
      continue;
    }
    WSYNC_LOG(Info, "group ", name, " restored from the state directory");
  }
  return absl::OkStatus();
}

absl::StatusOr<GroupSnapshot> DaemonCore::CreateGroup(const GroupSpec& spec) {
  return CreateAndForm(spec, /*trainer_declared=*/false);
}

absl::StatusOr<GroupSnapshot> DaemonCore::CreateAndForm(const GroupSpec& spec,
                                                        bool trainer_declared) {
  WSYNC_RETURN_IF_ERROR(ValidateGroupSpec(spec));
  WSYNC_RETURN_IF_ERROR(CheckEngineNetworks(spec));
  std::shared_ptr<WeightGroup> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(spec.name);
    if (it != groups_.end()) {
      if (it->second->spec() == spec) return it->second->Snapshot();
      return absl::AlreadyExistsError(absl::StrCat(
          "group '", spec.name, "' exists with other engines or device; destroy it first"));
    }
    WSYNC_ASSIGN_OR_RETURN(group, WeightGroup::Create(spec, platform_.get(), options_.group,
                                                      factories_, state_.get()));
    if (trainer_declared) group->SetTrainerDeclared();
    groups_[spec.name] = group;
  }
  absl::Status formed = group->Form();
  if (!formed.ok()) {
    // A group that never formed is not kept: the caller fixes the spec or the engines and retries.
    // Its formation already asked the engines that joined to drop it, so its record goes too.
    if (state_ != nullptr) (void)state_->Remove(spec.name);
    std::lock_guard<std::mutex> lock(mu_);
    groups_.erase(spec.name);
    return formed;
  }
  return group->Snapshot();
}

std::vector<GroupSnapshot> DaemonCore::ListGroups() const {
  std::vector<std::shared_ptr<WeightGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, g] : groups_) groups.push_back(g);
  }
  std::vector<GroupSnapshot> out;
  for (const auto& g : groups) out.push_back(g->Snapshot());
  return out;
}

absl::StatusOr<GroupSnapshot> DaemonCore::GetGroup(const std::string& name) const {
  auto group = FindGroup(name);
  if (!group) return absl::NotFoundError(absl::StrCat("unknown group '", name, "'"));
  return group->Snapshot();
}

absl::Status DaemonCore::DestroyGroup(const std::string& name) {
  auto group = FindGroup(name);
  if (!group) return absl::NotFoundError(absl::StrCat("unknown group '", name, "'"));
  WSYNC_RETURN_IF_ERROR(group->Destroy());
  std::lock_guard<std::mutex> lock(mu_);
  groups_.erase(name);
  group_owners_.erase(name);
  return absl::OkStatus();
}

absl::StatusOr<std::pair<GroupSnapshot, bool>> DaemonCore::DeclareSessionGroup(
    const std::string& session_id, const GroupSpec& spec) {
  // Checked before a group is touched: a declaration that cannot form leaves the group it would
  // replace as it is.
  WSYNC_RETURN_IF_ERROR(ValidateGroupSpec(spec));
  WSYNC_RETURN_IF_ERROR(CheckEngineNetworks(spec));
  std::lock_guard<std::mutex> declaring(declare_mu_);
  // Under the declaration lock: a session that ends now ends its groups after this one.
  WSYNC_RETURN_IF_ERROR(sessions_.Touch(session_id).status());
  std::shared_ptr<WeightGroup> existing = FindGroup(spec.name);
  std::optional<std::string> owner;
  uint32_t owned = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = group_owners_.find(spec.name); it != group_owners_.end()) owner = it->second;
    for (const auto& [name, session] : group_owners_) owned += session == session_id ? 1 : 0;
  }
  if (existing != nullptr && !owner.has_value()) {
    return absl::AlreadyExistsError(
        absl::StrCat("group '", spec.name,
                     "' is wsyncd's own (from its config or an operator): a trainer declares "
                     "groups under names of its own"));
  }
  if (existing != nullptr && !owner->empty() && *owner != session_id) {
    return absl::AlreadyExistsError(
        absl::StrCat("group '", spec.name, "' was declared by another session"));
  }
  // A new group, or one kept for its trainer that this session takes, counts against the cap.
  const bool already_ours = existing != nullptr && *owner == session_id;
  if (!already_ours && owned >= options_.max_groups_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session ", session_id, " has declared ", owned,
                     " groups, the most a session may: forget one first"));
  }
  if (existing != nullptr) {
    if (owner->empty()) {
      // Kept from a wsyncd before this one for its trainer: this session takes it.
      WSYNC_LOG(Info, "group ", spec.name, ": taken by session ", session_id,
                ", which declared it again");
      std::lock_guard<std::mutex> lock(mu_);
      group_owners_[spec.name] = session_id;
    }
    if (existing->spec() == spec) return std::make_pair(existing->Snapshot(), false);
    if (existing->Snapshot().state == GroupState::kUpdating) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec.name,
                       "' is being updated: its engines and options change after the update "
                       "ends"));
    }
    WSYNC_LOG(Info, "group ", spec.name, ": declared anew by session ", session_id,
              "; forming it again");
    WSYNC_RETURN_IF_ERROR(DestroyGroup(spec.name));
  }
  // A group of that name made meanwhile by an operator is theirs, not this session's.
  if (FindGroup(spec.name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("group '", spec.name, "' was created meanwhile by an operator"));
  }
  WSYNC_ASSIGN_OR_RETURN(GroupSnapshot formed, CreateAndForm(spec, /*trainer_declared=*/true));
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_owners_[spec.name] = session_id;
  }
  // A session that ended while its group formed would leave it with no one to end it.
  if (!sessions_.Touch(session_id).ok()) {
    (void)DestroyGroup(spec.name);
    return absl::NotFoundError(
        absl::StrCat("session ", session_id, " ended while group '", spec.name, "' formed"));
  }
  WSYNC_LOG(Info, "group ", spec.name, " declared by session ", session_id);
  return std::make_pair(std::move(formed), true);
}

absl::Status DaemonCore::ForgetSessionGroup(const std::string& session_id,
                                            const std::string& name) {
  WSYNC_RETURN_IF_ERROR(sessions_.Touch(session_id).status());
  std::lock_guard<std::mutex> declaring(declare_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = group_owners_.find(name);
    if (it == group_owners_.end() || it->second != session_id) {
      return absl::NotFoundError(
          absl::StrCat("session ", session_id, " declared no group '", name, "'"));
    }
  }
  absl::Status destroyed = DestroyGroup(name);
  if (destroyed.code() == absl::StatusCode::kNotFound) {
    // Gone already (an operator destroyed it): nothing is left to forget.
    std::lock_guard<std::mutex> lock(mu_);
    group_owners_.erase(name);
  }
  return destroyed;
}

void DaemonCore::EndSessionGroups(const std::string& session_id) {
  const auto owned_by = [&] {
    std::vector<std::string> owned;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, session] : group_owners_) {
      if (session == session_id) owned.push_back(name);
    }
    return owned;
  };
  // Most sessions declare nothing: they never wait on a declaration that is forming.
  if (owned_by().empty()) return;
  std::lock_guard<std::mutex> declaring(declare_mu_);
  for (const std::string& name : owned_by()) {
    // A wsyncd that drains or stops keeps its trainers' groups (and their records) for the
    // trainers' next declaration, as after a crash.
    absl::Status s = draining_ ? absl::CancelledError("wsyncd is draining") : DestroyGroup(name);
    if (s.ok()) {
      WSYNC_LOG(Info, "group ", name, " ended with session ", session_id, ", which declared it");
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = group_owners_.find(name);
    if (it == group_owners_.end()) continue;
    if (s.code() == absl::StatusCode::kNotFound) {
      group_owners_.erase(it);
      continue;
    }
    // Kept, for the trainer's next session to declare again (or an operator to destroy).
    it->second = "";
    WSYNC_LOG(Warning, "group ", name, ", declared by session ", session_id,
              ", which ended, is kept for its trainer's next declaration: ", s.message());
  }
}

std::vector<EngineRow> DaemonCore::ListEngines() {
  std::vector<std::shared_ptr<WeightGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, g] : groups_) groups.push_back(g);
  }
  std::vector<EngineRow> rows;
  for (const auto& g : groups) {
    for (EngineRow& r : g->ProbeEngines()) rows.push_back(std::move(r));
  }
  return rows;
}

absl::StatusOr<std::vector<EngineRow>> DaemonCore::ListEngines(const std::string& group) {
  auto g = FindGroup(group);
  if (!g) return absl::NotFoundError(absl::StrCat("unknown group '", group, "'"));
  return g->ProbeEngines();
}

absl::Status DaemonCore::HoldEngines(const std::string& group, const std::string& why) {
  auto g = FindGroup(group);
  if (!g) return absl::NotFoundError(absl::StrCat("unknown group '", group, "'"));
  return g->HoldEngines(why);
}

absl::StatusOr<std::vector<std::string>> DaemonCore::ResumeEngines(const std::string& group,
                                                                   const std::string& url) {
  auto g = FindGroup(group);
  if (!g) return absl::NotFoundError(absl::StrCat("unknown group '", group, "'"));
  return g->ResumeEngines(url);
}

absl::StatusOr<std::pair<uint32_t, SlotMemory*>> DaemonCore::ReserveOversizeSlot(
    const std::string& session_id, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(Session session, sessions_.Touch(session_id));
  if (bytes == 0) return absl::InvalidArgumentError("an oversize slot of 0 bytes");
  return pool_.LeaseOversize(session.device, session_id, bytes);
}

absl::StatusOr<std::unique_ptr<UpdateMember>> DaemonCore::BeginUpdate(const std::string& session_id,
                                                                      const std::string& group_name,
                                                                      const std::string& version,
                                                                      UpdateEvents* events,
                                                                      int tp_rank) {
  if (draining_) return absl::UnavailableError("wsyncd is draining; no new updates");
  // Checked before any of them is looked up, logged or kept in the history.
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the session id", session_id, kMaxNameBytes));
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the group name", group_name, kMaxNameBytes));
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the version", version, kMaxVersionBytes));
  WSYNC_ASSIGN_OR_RETURN(Session session, sessions_.Touch(session_id));
  auto group = FindGroup(group_name);
  if (!group) return absl::NotFoundError(absl::StrCat("unknown group '", group_name, "'"));
  const std::vector<TrainerFeed>& feeds = group->feeds();
  auto at = std::find_if(feeds.begin(), feeds.end(),
                         [&](const TrainerFeed& f) { return f.device == session.device; });
  if (at == feeds.end()) {
    std::vector<std::string> names;
    for (const TrainerFeed& f : feeds) names.push_back(FeedName(f));
    return absl::FailedPreconditionError(
        absl::StrCat("group '", group_name, "' is fed from ", absl::StrJoin(names, ", "),
                     " but session ", session_id, " holds slots of device ", session.device));
  }
  const size_t feed = static_cast<size_t>(at - feeds.begin());
  if (tp_rank >= 0 && static_cast<size_t>(tp_rank) != feed) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", group_name, "': TP rank ", tp_rank, " begins from ", FeedName(*at),
                     ", which the group's engines give TP rank ", feed,
                     "; start each trainer rank on the GPU "
                     "of the engine rank it feeds"));
  }
  WSYNC_RETURN_IF_ERROR(sessions_.StartUpdate(session_id));
  std::shared_ptr<JoinPoint> point;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<JoinPoint>& slot = join_points_[group_name];
    if (!slot) slot = std::make_shared<JoinPoint>();
    point = slot;
  }
  std::lock_guard<std::mutex> join_lock(point->mu);
  std::shared_ptr<UpdateRun> run = point->run.lock();
  if (run != nullptr && !run->accepting()) run = nullptr;
  absl::Status joined = absl::OkStatus();
  if (run != nullptr && feeds.size() > 1) {
    if (run->version() != version) {
      joined = absl::FailedPreconditionError(
          absl::StrCat("group '", group_name, "' is being updated to version '", run->version(),
                       "' (update ", run->id(),
                       "); every trainer rank of a TP group joins one update with "
                       "the same version"));
    } else {
      joined = run->Join(feed, session_id, events);
    }
    if (joined.ok()) {
      WSYNC_LOG(Info, "update ", run->id(), " of group ", group_name, ": session ", session_id,
                " joined, feeding ", FeedName(*at));
    }
  } else {
    auto started = StartRun(group, session, feed, version, events);
    if (started.ok()) {
      run = std::move(*started);
      point->run = run;
    }
    joined = started.status();
  }
  if (!joined.ok()) {
    sessions_.EndUpdate(session_id);
    return joined;
  }
  return std::make_unique<UpdateMember>(std::move(run), feed);
}

absl::StatusOr<std::shared_ptr<UpdateRun>> DaemonCore::StartRun(
    const std::shared_ptr<WeightGroup>& group, const Session& session, size_t feed,
    const std::string& version, UpdateEvents* events) {
  const std::string& group_name = group->spec().name;
  UpdateContext context;
  {
    std::lock_guard<std::mutex> lock(mu_);
    context.update_id = absl::StrFormat("u%llu", static_cast<unsigned long long>(next_update_++));
  }
  WSYNC_RETURN_IF_ERROR(group->BeginUpdate(UpdateInfo{context.update_id, version}));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++running_updates_;
  }
  context.version = version;
  context.bucket_timeout = options_.bucket_timeout;
  context.checksum = options_.checksum == "auto"
                         ? group->transport_kind().checksum_by_default()
                         : ParseChecksumKind(options_.checksum).value_or(ChecksumKind::kCrc32);
  if (UpdateObserver* observer = options_.observer) {
    context.on_bucket = [observer, group_name](uint64_t bytes, const BucketTiming& timing) {
      observer->BucketDone(group_name, bytes, timing);
    };
  }

  UpdateRecord record;
  record.update_id = context.update_id;
  record.group = group_name;
  record.version = version;
  record.session_id = session.id;
  record.state = "running";
  record.started = absl::Now();
  history_.Upsert(record);
  WSYNC_LOG(Info, "update ", context.update_id, " of group ", group_name, " to version '", version,
            "' started by session ", session.id,
            group->feeds().size() > 1
                ? absl::StrCat(", feeding ", FeedName(group->feeds()[feed]), "; ",
                               group->feeds().size() - 1, " more trainer rank(s) to join")
                : "");

  // Colocated trainers free or offload their weights between updates (resize_(0), .cpu(),
  // empty_cache()), and CUDA forbids freeing memory another process maps: a colocated update
  // closes the mappings its sessions pulled from before its trainers hear the result.
  const bool close_sources = group->transport_kind().engines_read_in_place();
  auto on_done = [this, record, close_sources](const UpdateOutcome& outcome) mutable {
    record.status = outcome.status;
    record.state = outcome.status.ok() ? "committed"
                   : outcome.status.code() == absl::StatusCode::kAborted ||
                           outcome.status.code() == absl::StatusCode::kCancelled
                       ? "aborted"
                       : "failed";
    record.buckets = outcome.buckets;
    record.bytes = outcome.bytes;
    record.wire_volume = outcome.wire_volume;
    record.seconds = outcome.seconds;
    if (!outcome.sessions.empty()) record.session_id = absl::StrJoin(outcome.sessions, ",");
    for (const EngineOutcome& e : outcome.engines) {
      if (e.status.ok()) record.committed_engines.push_back(e.engine);
      record.engine_results.push_back(absl::StrCat(
          e.engine, e.engine_version.empty() ? "" : absl::StrCat(" (", e.engine_version, ")"), ": ",
          e.status.ok() ? "ok" : e.status.ToString(),
          e.weights_check.empty() || !e.status.ok() ? "" : absl::StrCat("; ", e.weights_check)));
    }
    history_.Upsert(record);
    if (options_.observer != nullptr) {
      options_.observer->UpdateDone(record.group, record.version, record.state, outcome);
    }
    for (const std::string& s : outcome.sessions) sessions_.EndUpdate(s);
    if (close_sources) {
      for (const std::string& s : outcome.sessions) CloseSourcesAfterUpdate(s);
    }
    LogUpdate(record, outcome);
    std::lock_guard<std::mutex> lock(mu_);
    --running_updates_;
    cv_.notify_all();
  };
  return std::make_shared<UpdateRun>(std::move(context), group, &pool_, feed, session.id, events,
                                     std::move(on_done));
}

namespace {

void LogUpdate(const UpdateRecord& record, const UpdateOutcome& outcome) {
  const LogLevel level = outcome.status.ok() ? LogLevel::kInfo : LogLevel::kWarning;
  if (!LogEnabled(level)) return;
  const BucketTiming& t = outcome.bucket_totals;
  const double gib = static_cast<double>(outcome.bytes) / (1ull << 30);
  const double rate = outcome.seconds > 0 ? gib / outcome.seconds : 0;
  std::vector<std::string> engines;
  for (const EngineOutcome& e : outcome.engines) {
    engines.push_back(absl::StrCat(e.engine, " ", e.status.ok() ? "ok" : e.status.ToString()));
  }
  // One line per update: what happened and where its time went (bucket phases summed).
  const std::string message = absl::StrFormat(
      "update %s of group %s to version '%s' %s: %u buckets, %.3f GiB in %.3f s (%.2f GiB/s); "
      "first launch %.3f s, verify %.3f s, idle %.3f s, wire %.3f s, answer %.3f s, finish "
      "%.3f s%s%s",
      record.update_id, record.group, record.version, record.state, outcome.buckets, gib,
      outcome.seconds, rate, outcome.first_launch_seconds, t.verify, t.idle, t.wire, t.answer,
      outcome.finish_seconds,
      engines.empty() ? "" : absl::StrCat("; engines: ", absl::StrJoin(engines, ", ")),
      outcome.status.ok() ? "" : absl::StrCat(" (", outcome.status.ToString(), ")"));
  LogLine(level, message,
          {{"event", "update"},
           {"update_id", record.update_id},
           {"group", record.group},
           {"version", record.version},
           {"outcome", record.state},
           {"status", std::string(absl::StatusCodeToString(outcome.status.code()))},
           {"buckets", static_cast<uint64_t>(outcome.buckets)},
           {"bytes", static_cast<uint64_t>(outcome.bytes)},
           {"seconds", outcome.seconds},
           {"gib_per_second", rate},
           {"first_launch_seconds", outcome.first_launch_seconds},
           {"verify_seconds", t.verify},
           {"idle_seconds", t.idle},
           {"wire_seconds", t.wire},
           {"answer_seconds", t.answer},
           {"finish_seconds", outcome.finish_seconds}});
}

}  // namespace

DaemonStatusView DaemonCore::Status() const {
  DaemonStatusView v;
  v.mode = options_.mode;
  v.uptime = absl::Now() - started_;
  v.draining = draining_;
  v.sessions = sessions_.List().size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    v.groups = groups_.size();
  }
  v.slots = pool_.slot_count();
  v.slot_bytes = options_.slot_bytes;
  v.committed = history_.committed();
  v.failed = history_.failed();
  v.bytes_sent = history_.bytes_sent();
  v.last_commit = history_.last_committed_at();
  return v;
}

std::vector<UpdateProgressView> DaemonCore::ListProgress() const {
  std::vector<std::shared_ptr<JoinPoint>> points;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [group, point] : join_points_) points.push_back(point);
  }
  std::vector<UpdateProgressView> out;
  for (const auto& point : points) {
    std::shared_ptr<UpdateRun> run;
    {
      std::lock_guard<std::mutex> lock(point->mu);
      run = point->run.lock();
    }
    if (run != nullptr && run->running()) out.push_back(run->Progress());
  }
  return out;
}

DaemonStatusView DaemonCore::Diagnose() const {
  DaemonStatusView v = Status();
  absl::StatusOr<std::vector<std::string>> uuids = platform_->DeviceUuids();
  if (uuids.ok()) v.device_uuids = *std::move(uuids);
  v.devices = uuids.ok() ? platform_->CheckDevices() : uuids.status();
  v.nccl_libraries = platform_->LoadedNcclLibraries();
  return v;
}

bool DaemonCore::Undrain() {
  const bool was = draining_.exchange(false);
  if (was) WSYNC_LOG(Info, "drain ended: new sessions and updates are taken again");
  return was;
}

DrainResult DaemonCore::Drain(absl::Duration timeout) {
  draining_ = true;
  DrainResult result;
  std::unique_lock<std::mutex> lock(mu_);
  result.waited = static_cast<uint32_t>(running_updates_);
  const absl::Time deadline = absl::Now() + timeout;
  while (running_updates_ > 0 && absl::Now() < deadline) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  result.drained = running_updates_ == 0;
  return result;
}

}  // namespace wsync
