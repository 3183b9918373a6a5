#include "daemon/core/weight_group.h"

#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "daemon/core/commit_verdict.h"
#include "daemon/core/engine_group_name.h"
#include "daemon/core/fan_out.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/transport_kind.h"
#include "daemon/core/weights_check.h"

namespace wsync {

absl::string_view GroupStateName(GroupState state) {
  switch (state) {
    case GroupState::kForming:
      return "forming";
    case GroupState::kReady:
      return "ready";
    case GroupState::kUpdating:
      return "updating";
    case GroupState::kBroken:
      return "broken";
    case GroupState::kDestroyed:
      return "destroyed";
  }
  return "unknown";
}

namespace {

// The port of a rendezvous address ("host:port"); 0 for "" or anything else.
uint16_t StorePort(const std::string& address) {
  const auto split = SplitHostPort(address);
  return split.ok() ? split->second : 0;
}

std::vector<std::string> UrlsOf(const GroupSpec& spec) {
  std::vector<std::string> urls;
  for (const EngineSpec& e : spec.engines) urls.push_back(e.url);
  return urls;
}

std::vector<EngineAdapter*> Pointers(const std::vector<std::unique_ptr<EngineAdapter>>& owned) {
  std::vector<EngineAdapter*> out;
  for (const auto& a : owned) out.push_back(a.get());
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<WeightGroup>> WeightGroup::Create(GroupSpec spec, Platform* platform,
                                                                 GroupOptions options,
                                                                 const GroupFactories& factories,
                                                                 GroupStateStore* store,
                                                                 const GroupRecord* previous) {
  WSYNC_RETURN_IF_ERROR(ValidateGroupSpec(spec));
  WSYNC_ASSIGN_OR_RETURN(std::vector<TrainerFeed> feeds, FeedsOf(spec, platform));
  WSYNC_ASSIGN_OR_RETURN(const TransportKind* transport, TransportOf(spec));
  const std::vector<std::string> paths = transport->data_paths();
  std::vector<std::unique_ptr<EngineAdapter>> adapters;
  uint32_t offset = 1;
  for (const EngineSpec& e : spec.engines) {
    WSYNC_ASSIGN_OR_RETURN(
        std::unique_ptr<EngineAdapter> adapter,
        factories.adapter(spec, EngineEndpoint{e.url, e.ranks, offset}, options.timeouts));
    // The engine's first binding among the transport's paths, in the transport's order.
    const auto path = std::find_if(paths.begin(), paths.end(), [&](const std::string& p) {
      return adapter->Binding(p) != nullptr;
    });
    if (path == paths.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec.name, "': ", spec.kind, " engine ", e.url,
                       " cannot receive over the ", absl::StrJoin(paths, " or "),
                       " data path that the ", transport->name(), " transport needs"));
    }
    WSYNC_RETURN_IF_ERROR(adapter->UseDataPath(*path));
    adapters.push_back(std::move(adapter));
    offset += e.ranks;
  }
  std::shared_ptr<WeightGroup> group(
      new WeightGroup(spec, EngineGroupName(spec.name, options.incarnation), std::move(feeds),
                      std::move(adapters), store, platform, factories, options.transport));
  group->transport_kind_ = transport;
  // Taken over before the first transport is made: its store must avoid the earlier one's port.
  if (previous != nullptr) group->TakeOver(*previous, platform, options, factories);
  {
    std::lock_guard<std::mutex> lock(group->mu_);
    WSYNC_RETURN_IF_ERROR(group->MakeTransportLocked(group->membership_.All()));
  }
  if (group->quorum_group()) {
    const absl::Duration interval = options.left_out_check_interval;
    group->watcher_ = std::thread([g = group.get(), interval] { g->WatchLeftOut(interval); });
  }
  return group;
}

void WeightGroup::WatchLeftOut(absl::Duration interval) {
  std::unique_lock<std::mutex> wait(watcher_mu_);
  while (!watcher_stop_) {
    if (watcher_cv_.wait_for(wait, absl::ToChronoNanoseconds(interval),
                             [&] { return watcher_stop_; })) {
      break;
    }
    wait.unlock();
    std::vector<size_t> outside;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ == GroupState::kReady || state_ == GroupState::kUpdating) {
        outside = membership_.ToWatch(absl::Now());
      }
    }
    // Health is the engine's read-only route, bounded by the probe timeout; adapters answer it
    // while an update uses them (wsyncctl engines does the same).
    const std::vector<absl::Status> heard = OnEachEngine(AdaptersAt(outside), [](EngineAdapter& a) {
      // Healthy with an error is an engine wsyncd would refuse (its probe fails): not back.
      const EngineHealth h = a.Health();
      if (h.healthy && h.error.empty()) return absl::OkStatus();
      return absl::UnavailableError(
          absl::StrCat("its last health check failed", h.error.empty() ? "" : ": ", h.error));
    });
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = 0; k < outside.size(); ++k) membership_.Heard(outside[k], heard[k]);
    }
    wait.lock();
  }
}

std::set<std::string> WeightGroup::AnsweringAgain() const {
  std::lock_guard<std::mutex> lock(mu_);
  return membership_.AnsweringAgain();
}

WeightGroup::WeightGroup(GroupSpec spec, std::string engine_group, std::vector<TrainerFeed> feeds,
                         std::vector<std::unique_ptr<EngineAdapter>> adapters,
                         GroupStateStore* store, Platform* platform, GroupFactories factories,
                         TransportOptions transport_options)
    : spec_(std::move(spec)),
      feeds_(std::move(feeds)),
      adapters_(std::move(adapters)),
      adapter_ptrs_(Pointers(adapters_)),
      store_(store),
      platform_(platform),
      factories_(std::move(factories)),
      transport_options_(std::move(transport_options)),
      membership_(spec_.name, UrlsOf(spec_), spec_.quorum),
      recovery_(spec_.name),
      engine_group_(std::move(engine_group)) {
  for (const auto& a : adapters_) bucket_rules_.Merge(a->Capabilities().bucket_rules);
}

std::vector<std::string> WeightGroup::UrlsAt(const std::vector<size_t>& indexes) const {
  std::vector<std::string> out;
  for (size_t i : indexes) out.push_back(membership_.url(i));
  return out;
}

std::vector<EngineAdapter*> WeightGroup::AdaptersAt(const std::vector<size_t>& indexes) const {
  std::vector<EngineAdapter*> out;
  for (size_t i : indexes) out.push_back(adapter_ptrs_[i]);
  return out;
}

void WeightGroup::NumberRanksLocked(const std::vector<size_t>& members) {
  // An engine outside the formation holds no rank of it.
  for (const auto& a : adapters_) a->SetRankOffset(0);
  uint32_t offset = 1;
  for (size_t i : members) {
    adapters_[i]->SetRankOffset(offset);
    offset += spec_.engines[i].ranks;
  }
}

absl::Status WeightGroup::MakeTransportLocked(const std::vector<size_t>& members) {
  TransportEnv env;
  env.engine_group = engine_group_;
  env.avoid_store_ports = recovery_.AvoidStorePorts();
  env.spec = spec_;
  env.spec.engines.clear();
  NumberRanksLocked(members);
  for (size_t i : members) {
    env.spec.engines.push_back(spec_.engines[i]);
    env.adapters.push_back(adapter_ptrs_[i]);
  }
  env.engines_needed = quorum_group() ? spec_.quorum : 0;
  env.platform = platform_;
  env.options = transport_options_;
  env.on_bucket_failed = [this](const absl::Status& s) { MarkBroken(s); };
  absl::StatusOr<std::unique_ptr<Transport>> made = factories_.transport(std::move(env));
  if (!made.ok()) {
    // The transport in place keeps its engines, numbered as it made them.
    NumberRanksLocked(membership_.members());
    return made.status();
  }
  if (transport_) transport_->Release("the group's engines changed");
  transport_ = *std::move(made);
  membership_.set_members(members);
  return absl::OkStatus();
}

void WeightGroup::TakeOver(const GroupRecord& previous, Platform* platform,
                           const GroupOptions& options, const GroupFactories& factories) {
  last_version_ = previous.last_version;
  const std::vector<std::string> urls = UrlsOf(spec_);
  needs_full_ = recovery_.TakeOver(previous, std::set<std::string>(urls.begin(), urls.end()));
  if (recovery_.stale_engine_groups().empty()) return;
  // A group of the earlier engines, never formed: it only gives them adapters to be asked
  // through. Never formed, so it needs no quorum (and the record's engines may have been cut to
  // those still allowed, fewer than its quorum).
  GroupSpec stale_spec = previous.spec;
  stale_spec.quorum = 0;
  auto stale = Create(stale_spec, platform, options, factories);
  if (!stale.ok()) {
    WSYNC_LOG(Warning, "group ", spec_.name,
              ": cannot ask the earlier engines to drop the group(s) '",
              recovery_.ShownStaleGroups(), "': ", stale.status().message());
    return;
  }
  recovery_.SetStaleEngines(UrlsOf(stale_spec), [stale = *std::move(stale)](const std::string& n) {
    return stale->transport_->LeaveStale(n);
  });
}

void WeightGroup::SetTrainerDeclared() {
  std::lock_guard<std::mutex> lock(mu_);
  trainer_declared_ = true;
}

absl::Status WeightGroup::PersistLocked() {
  if (store_ == nullptr) return absl::OkStatus();
  GroupRecord record;
  record.spec = spec_;
  record.trainer_declared = trainer_declared_;
  record.engine_group = engine_group_;
  recovery_.Fill(&record);
  record.open_update_id = open_update_.update_id;
  record.open_version = open_update_.version;
  record.last_version = last_version_;
  record.needs_full_version = needs_full_;
  absl::Status saved = store_->Save(record);
  if (!saved.ok()) {
    return absl::Status(saved.code(), absl::StrCat("group '", spec_.name,
                                                   "': cannot record it in the state directory: ",
                                                   saved.message()));
  }
  return absl::OkStatus();
}

std::vector<EngineAdapter*> WeightGroup::UnflaggedLocked() const {
  std::vector<EngineAdapter*> out;
  for (EngineAdapter* a : adapter_ptrs_) {
    if (needs_full_.count(a->endpoint().url) == 0) out.push_back(a);
  }
  return out;
}

bool WeightGroup::pull_preferred() const {
  // The adapters and their data paths are fixed at creation.
  for (const std::unique_ptr<EngineAdapter>& adapter : adapters_) {
    const DataPathBinding* binding = adapter->used_binding();
    if (binding == nullptr || !transport_kind_->pull_by_default(binding->data_path())) {
      return false;
    }
  }
  return !adapters_.empty();
}

WeightGroup::~WeightGroup() {
  {
    std::lock_guard<std::mutex> wait(watcher_mu_);
    watcher_stop_ = true;
  }
  watcher_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (transport_) transport_->Release("group torn down");
}

absl::Status WeightGroup::Form() {
  std::lock_guard<std::mutex> lock(mu_);
  // A trainer's update may have formed the group first (it forms a group that is not ready); its
  // threads use the transport without the lock, so nothing here may make it again.
  if (update_open_) return absl::OkStatus();
  membership_.ClearSetAside();
  return FormLocked();
}

absl::Status WeightGroup::FormLocked(std::vector<size_t> candidates) {
  if (candidates.empty()) candidates = quorum_group() ? membership_.Retryable() : membership_.All();
  state_ = GroupState::kForming;
  error_.clear();
  // Before any init: an engine still holding the earlier wsyncd's group refuses to join.
  recovery_.LeaveStaleGroups();
  auto fail = [&](absl::Status s, bool joining = false) {
    const std::vector<std::string> notes = recovery_.FormationNotes(
        joining && recovery_.after_restart() ? transport_->EnginesFailedToJoin()
                                             : std::vector<std::string>(),
        UrlsAt(membership_.members()));
    if (!notes.empty()) {
      s = absl::Status(s.code(), absl::StrCat(s.message(), "; ", absl::StrJoin(notes, "; ")));
    }
    error_ = std::string(s.message());
    state_ = GroupState::kBroken;
    WSYNC_LOG(Warning, "group ", spec_.name, ": formation failed: ", s.message());
    return s;
  };
  const std::vector<absl::Status> probes =
      OnEachEngine(AdaptersAt(candidates), [](EngineAdapter& a) { return a.Probe(); });
  if (!quorum_group()) {
    if (absl::Status s = FirstError(probes); !s.ok()) return fail(s);
  } else {
    std::vector<size_t> answered;
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (probes[k].ok()) {
        answered.push_back(candidates[k]);
      } else {
        membership_.SetAside(candidates[k], probes[k]);
      }
    }
    candidates = std::move(answered);
    if (candidates.size() < engines_needed()) return fail(membership_.TooFew(candidates.size()));
  }
  // Recorded before the engines init it, so a wsyncd that dies from here on leaves a record of
  // the group they may hold.
  if (absl::Status s = PersistLocked(); !s.ok()) return fail(s);
  for (;;) {
    if (candidates != membership_.members()) {
      if (absl::Status s = MakeTransportLocked(candidates); !s.ok()) return fail(s);
    }
    const absl::Status formed = transport_->Form();
    if (formed.ok()) break;
    // A quorum group forms again without the engines that failed to join, while enough remain.
    const std::vector<std::string> failed =
        quorum_group() ? transport_->EnginesFailedToJoin() : std::vector<std::string>();
    if (failed.empty()) return fail(formed, /*joining=*/true);
    std::vector<size_t> joined;
    for (size_t i : candidates) {
      const std::string& url = membership_.url(i);
      if (std::find(failed.begin(), failed.end(), url) == failed.end()) {
        joined.push_back(i);
        continue;
      }
      membership_.SetAside(
          i, absl::Status(formed.code(), absl::StrCat("it failed to join: ", formed.message())),
          /*back_off=*/true);
      recovery_.NeedsRestart(url);
    }
    if (joined.size() < engines_needed()) return fail(formed, /*joining=*/true);
    candidates = std::move(joined);
  }
  membership_.Formed();
  // Recorded again only when what the record says changed.
  const bool changed = recovery_.Formed(UrlsAt(membership_.members()),
                                        membership_.members().size() == adapters_.size(),
                                        StorePort(transport_->rendezvous()));
  if (absl::Status s = changed ? PersistLocked() : absl::OkStatus(); !s.ok()) {
    // The group works; only what the next incarnation knows of it is less sure.
    WSYNC_LOG(Warning, "group ", spec_.name, ": ", s.message());
  }
  state_ = GroupState::kReady;
  WSYNC_LOG(Info, "group ", spec_.name, " ready: ", transport_->Describe());
  return absl::OkStatus();
}

absl::Status WeightGroup::Destroy() {
  std::lock_guard<std::mutex> lock(mu_);
  return DestroyLocked(/*forget=*/true);
}

absl::Status WeightGroup::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  return DestroyLocked(/*forget=*/false);
}

absl::Status WeightGroup::DestroyLocked(bool forget) {
  if (update_open_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", spec_.name, "' is being updated; abort the update first"));
  }
  if (state_ == GroupState::kReady || state_ == GroupState::kBroken) {
    // A broken group may still be held by engines that survived; they must drop it, or they
    // refuse the next group of this name.
    transport_->Disband();
  }
  transport_->Release("group destroyed");
  state_ = GroupState::kDestroyed;
  if (forget) {
    for (const auto& a : adapters_) {
      auto waiting = needs_full_.find(a->endpoint().url);
      if (waiting == needs_full_.end()) continue;
      WSYNC_LOG(Warning, "group ", spec_.name, " destroyed while engine ", waiting->first,
                " waits, paused, for a full version (", waiting->second,
                "); resume it by hand: ", a->ManualResumeHint());
    }
    if (store_ != nullptr) {
      if (absl::Status s = store_->Remove(spec_.name); !s.ok()) {
        WSYNC_LOG(Warning, "group ", spec_.name, ": cannot remove its record: ", s.message());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WeightGroup::BeginUpdate(const UpdateInfo& update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == GroupState::kDestroyed) {
    return absl::NotFoundError(absl::StrCat("group '", spec_.name, "' was destroyed"));
  }
  if (update_open_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", spec_.name, "' is already being updated"));
  }
  membership_.ClearSetAside();
  reached_.clear();
  // The engines a quorum group forms with again (empty: FormLocked's own choice), and those of
  // them the background check heard answer again.
  std::vector<size_t> form_with, coming_back;
  if (quorum_group() && state_ == GroupState::kReady &&
      membership_.members().size() < adapters_.size()) {
    // Engines an earlier update went on without: if the background check heard one answer, the
    // group forms again to take it back; those still out are set aside with what was last heard.
    coming_back = membership_.TakeBack(absl::Now());
    if (!coming_back.empty()) {
      WSYNC_LOG(Info, "group ", spec_.name, ": an engine it went without answers again");
      form_with = membership_.members();
      form_with.insert(form_with.end(), coming_back.begin(), coming_back.end());
      std::sort(form_with.begin(), form_with.end());
      state_ = GroupState::kForming;
    }
  }
  if (state_ == GroupState::kReady) {
    if (absl::Status formed = transport_->CheckFormed(); !formed.ok()) {
      // Re-forming now spares the update a failure.
      WSYNC_LOG(Info, "group ", spec_.name, ": ", formed.message());
      state_ = GroupState::kBroken;
      error_ = std::string(formed.message());
    }
  }
  if (state_ == GroupState::kBroken || state_ == GroupState::kForming) {
    WSYNC_LOG(Info, "group ", spec_.name, " is ", GroupStateName(state_),
              "; re-forming it before the update");
    // The engines may still hold the old group; they refuse to init one of the same name.
    transport_->Disband();
    transport_->Release("re-forming the group");
    // A formation that fails leaves nothing formed (the transport releases what it made).
    absl::Status formed = FormLocked(form_with);
    // An engine that answered its health check but not its probe or its join would make every
    // update form the group again: it backs off.
    for (size_t i : coming_back) {
      if (const absl::Status* why = membership_.SetAsideWhy(i); why != nullptr) {
        membership_.SetAside(i, absl::Status(*why), /*back_off=*/true);
      }
    }
    if (!formed.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "group '", spec_.name, "' is broken and re-forming it failed: ", formed.message()));
    }
  }
  // Asked again for every update: a member's rules may change between updates (a relay group's
  // member is a downstream wsyncd, whose rules are those of the groups it feeds). They hold
  // still while the update runs.
  BucketRules rules;
  for (const auto& a : adapters_) rules.Merge(a->Capabilities().bucket_rules);
  bucket_rules_ = rules;
  // Recorded before any engine is paused: a wsyncd that dies from here on leaves a record that
  // the engines may be paused on a mix of versions.
  open_update_ = update;
  if (absl::Status s = PersistLocked(); !s.ok()) {
    open_update_ = UpdateInfo{};
    return s;
  }
  auto resume_all = [&] {
    OnEachEngine(UnflaggedLocked(), [](EngineAdapter& a) { return a.ResumeGeneration(); });
    open_update_ = UpdateInfo{};
    if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
  };
  if (absl::Status s = PauseMembersLocked(update); !s.ok()) {
    resume_all();
    return s;
  }
  if (absl::Status s = transport_->BeginUpdate(update); !s.ok()) {
    resume_all();
    return s;
  }
  for (size_t i : membership_.members()) {
    const std::string& url = adapters_[i]->endpoint().url;
    if (membership_.SetAsideWhy(i) == nullptr && adapters_[i]->BeginLeavesWeightsUndefined()) {
      reached_.insert(url);
    }
  }
  state_ = GroupState::kUpdating;
  update_open_ = true;
  return absl::OkStatus();
}

absl::Status WeightGroup::PauseMembersLocked(const UpdateInfo& update) {
  if (!quorum_group()) {
    WSYNC_RETURN_IF_ERROR(FirstError(
        OnEachEngine(adapter_ptrs_, [](EngineAdapter& a) { return a.PauseGeneration(); })));
    return FirstError(
        OnEachEngine(adapter_ptrs_, [&](EngineAdapter& a) { return a.BeginUpdate(update); }));
  }
  // Each engine on its own: one that fails to pause or to open its update is left out.
  const std::vector<size_t> members = membership_.members();
  const std::vector<absl::Status> results =
      OnEachEngine(AdaptersAt(members), [&](EngineAdapter& a) {
        WSYNC_RETURN_IF_ERROR(a.PauseGeneration());
        return a.BeginUpdate(update);
      });
  std::vector<size_t> kept;
  for (size_t k = 0; k < members.size(); ++k) {
    if (results[k].ok()) {
      kept.push_back(members[k]);
    } else {
      membership_.SetAside(members[k], results[k], /*back_off=*/true);
    }
  }
  if (kept.size() == members.size()) return absl::OkStatus();
  if (kept.size() < engines_needed()) {
    return membership_.TooFew(kept.size());
  }
  // The transport must not wait on them: a broadcast's collective counts every rank it formed
  // with, and IPC requests go to every engine it holds. The engines kept join again paused, with
  // their updates open.
  transport_->Disband();
  transport_->Release("forming again without the engines left out");
  if (absl::Status s = FormLocked(kept); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("group '", spec_.name,
                                               "': forming again without the engines left out "
                                               "failed: ",
                                               s.message()));
  }
  return absl::OkStatus();
}

absl::Status WeightGroup::ValidateBucket(const BucketManifest& manifest) const {
  WSYNC_RETURN_IF_ERROR(CheckBucketRules(bucket_rules_, manifest));
  for (const auto& a : adapters_) WSYNC_RETURN_IF_ERROR(a->ValidateBucket(manifest));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BucketHandle>> WeightGroup::StartBucket(
    const std::vector<BucketSource>& sources, const BucketManifest& manifest,
    const BucketContext& context, absl::Time deadline) {
  std::vector<std::string> newly_reached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != GroupState::kUpdating) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec_.name, "' is ", GroupStateName(state_), ", not updating"));
    }
    // Counted before any byte moves: from here on the engine may hold part of this version.
    const std::map<std::string, absl::Status> dropped = transport_->DroppedEngines();
    for (size_t i : membership_.members()) {
      const std::string& url = adapters_[i]->endpoint().url;
      if (membership_.SetAsideWhy(i) == nullptr && dropped.count(url) == 0 &&
          reached_.insert(url).second) {
        newly_reached.push_back(url);
      }
    }
  }
  // Outside the lock: a launch may wait on the engines, and its failure hook takes the lock.
  auto handle = transport_->StartBucket(sources, manifest, context, deadline);
  if (!handle.ok()) {
    // Refused before any engine was sent a byte of it (Transport::StartBucket): an engine this
    // bucket was to reach first holds nothing of the update.
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& url : newly_reached) reached_.erase(url);
  }
  return handle;
}

void WeightGroup::MarkBroken(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = GroupState::kBroken;
    error_ = std::string(status.message());
  }
  WSYNC_LOG(Warning, "group ", spec_.name, ": bucket failed, group broken: ", status.message());
}

void WeightGroup::AbortUpdate(const std::string& reason, std::vector<EngineOutcome>* outcomes) {
  WSYNC_LOG(Info, "group ", spec_.name, ": update aborted: ", reason);
  std::vector<EngineAdapter*> resume, abandon;
  {
    std::lock_guard<std::mutex> lock(mu_);
    transport_->EndUpdate(absl::StrCat("update aborted: ", reason));
    // Paused since BeginUpdate, an engine a bucket reached stays so: resuming it would serve a
    // mix of two versions under the old version's name.
    for (size_t i = 0; i < adapters_.size(); ++i) {
      const std::string& url = adapters_[i]->endpoint().url;
      if (reached_.count(url) != 0) {
        MarkPartialLocked(
            i,
            absl::StrCat("update ", open_update_.update_id, " to version '", open_update_.version,
                         "' reached it and was aborted: it may hold part of it (",
                         SanitizePeerText(reason), ")"),
            outcomes);
        abandon.push_back(adapter_ptrs_[i]);
      } else if (needs_full_.count(url) == 0) {
        resume.push_back(adapter_ptrs_[i]);
      }
    }
    reached_.clear();
  }
  OnEachEngine(abandon, [](EngineAdapter& a) {
    a.AbandonUpdate();
    return absl::OkStatus();
  });
  OnEachEngine(resume, [](EngineAdapter& a) { return a.ResumeGeneration(); });
  std::lock_guard<std::mutex> lock(mu_);
  update_open_ = false;
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
  open_update_ = UpdateInfo{};
  membership_.ClearSetAside();
  if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
}

absl::Status WeightGroup::HoldEngines(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (update_open_) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec_.name, "' is updating; its engines are held by the update"));
    }
    for (size_t i = 0; i < adapters_.size(); ++i) MarkPartialLocked(i, why, nullptr);
    if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
  }
  WSYNC_LOG(Warning, "group ", spec_.name, ": every engine paused until a full version: ", why);
  return FirstError(
      OnEachEngine(adapter_ptrs_, [](EngineAdapter& a) { return a.PauseGeneration(); }));
}

void WeightGroup::MarkPartialLocked(size_t i, const std::string& why,
                                    std::vector<EngineOutcome>* outcomes) {
  const std::string& url = adapters_[i]->endpoint().url;
  needs_full_[url] = why;
  WSYNC_LOG(Warning, "group ", spec_.name, ": engine ", url,
            " stays paused until a complete update or an operator's resume: ", why);
  if (outcomes == nullptr) return;
  auto it = std::find_if(outcomes->begin(), outcomes->end(),
                         [&](const EngineOutcome& o) { return o.engine == url; });
  if (it == outcomes->end()) {
    it = outcomes->insert(outcomes->end(),
                          EngineOutcome{url, absl::AbortedError("the update did not commit"),
                                        adapters_[i]->probed_version(), ""});
  }
  it->needs_full_version = why;
}

absl::StatusOr<std::vector<std::string>> WeightGroup::ResumeEngines(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == GroupState::kDestroyed) {
    return absl::NotFoundError(absl::StrCat("group '", spec_.name, "' was destroyed"));
  }
  if (update_open_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group '", spec_.name, "' is being updated; its engines resume when the update ends"));
  }
  std::vector<EngineAdapter*> targets;
  for (EngineAdapter* a : adapter_ptrs_) {
    const std::string& u = a->endpoint().url;
    if (url.empty() ? needs_full_.count(u) != 0 : u == url) targets.push_back(a);
  }
  if (targets.empty()) {
    return url.empty()
               ? absl::FailedPreconditionError(
                     absl::StrCat("no engine of group '", spec_.name, "' waits for a full version"))
               : absl::NotFoundError(absl::StrCat("group '", spec_.name, "' has no engine ", url));
  }
  const std::vector<absl::Status> results =
      OnEachEngine(targets, [](EngineAdapter& a) { return a.ResumeGeneration(); });
  std::vector<std::string> resumed;
  std::vector<std::string> errors;
  absl::Status first;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string& u = targets[i]->endpoint().url;
    if (!results[i].ok()) {
      errors.push_back(std::string(results[i].message()));
      if (first.ok()) first = results[i];
      continue;
    }
    auto waiting = needs_full_.find(u);
    WSYNC_LOG(Warning, "group ", spec_.name, ": engine ", u, " resumed by an operator",
              waiting == needs_full_.end()
                  ? std::string()
                  : absl::StrCat(", serving what it holds (", waiting->second, ")"));
    if (waiting != needs_full_.end()) needs_full_.erase(waiting);
    resumed.push_back(u);
  }
  if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
  if (!errors.empty()) {
    return absl::Status(
        first.code(),
        absl::StrCat(resumed.empty() ? std::string()
                                     : absl::StrCat("resumed ", absl::StrJoin(resumed, ", "), "; "),
                     "failed: ", absl::StrJoin(errors, "; ")));
  }
  return resumed;
}

std::set<std::string> WeightGroup::ReachedEngines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reached_;
}

GroupSnapshot WeightGroup::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  GroupSnapshot s;
  s.spec = spec_;
  s.state = state_;
  s.world_size = transport_->world_size();
  for (const auto& a : adapters_) s.endpoints.push_back(a->endpoint());
  s.rendezvous = transport_->rendezvous();
  s.last_version = last_version_;
  s.error = error_;
  s.updates = updates_;
  s.bucket_rules = bucket_rules_;
  s.needs_full_version = needs_full_;
  return s;
}

std::vector<EngineRow> WeightGroup::ProbeEngines() {
  std::map<std::string, std::string> waiting, restarts;
  // Copied under the lock: a quorum group renumbers its engines' ranks when it forms.
  std::vector<EngineEndpoint> endpoints;
  std::string group_error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting = needs_full_;
    restarts = recovery_.needs_restart();
    for (const auto& a : adapters_) endpoints.push_back(a->endpoint());
    if (state_ == GroupState::kBroken) group_error = error_;
  }
  return FanOut(adapters_.size(), [&](size_t i) {
    const EngineEndpoint& e = endpoints[i];
    auto it = waiting.find(e.url);
    auto restart = restarts.find(e.url);
    return EngineRow{spec_.name,
                     spec_.kind,
                     e,
                     adapters_[i]->Health(),
                     it == waiting.end() ? std::string() : it->second,
                     restart == restarts.end() ? std::string() : restart->second,
                     group_error};
  });
}

}  // namespace wsync
