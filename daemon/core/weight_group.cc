#include "daemon/core/weight_group.h"

#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/commit_verdict.h"
#include "daemon/core/peer_text.h"
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

std::vector<DataPath> DataPathsOf(TransportKind transport) {
  if (transport == TransportKind::kIpc) return {DataPath::kCudaIpc, DataPath::kCudaIpcStream};
  return {DataPath::kBroadcast};
}

namespace {

// The port of a rendezvous address ("host:port"); 0 for "" or anything else.
uint16_t StorePort(const std::string& address) {
  const size_t colon = address.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port > 65535) {
    return 0;
  }
  return static_cast<uint16_t>(port);
}

// Names an earlier wsyncd gave the group, as logs and callers see them (ShownEngineGroup).
std::string ShownNames(const std::vector<std::string>& names) {
  std::vector<std::string> shown;
  for (const std::string& n : names) shown.push_back(ShownEngineGroup(n));
  return absl::StrJoin(shown, "', '");
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
  const std::vector<DataPath> paths = DataPathsOf(spec.transport);
  std::vector<std::unique_ptr<EngineAdapter>> adapters;
  uint32_t offset = 1;
  for (const EngineSpec& e : spec.engines) {
    WSYNC_ASSIGN_OR_RETURN(
        std::unique_ptr<EngineAdapter> adapter,
        factories.adapter(spec, EngineEndpoint{e.url, e.ranks, offset}, options.timeouts));
    const AdapterCapabilities caps = adapter->Capabilities();
    if (std::none_of(paths.begin(), paths.end(), [&](DataPath p) { return caps.Supports(p); })) {
      std::vector<std::string> names;
      for (DataPath p : paths) names.push_back(std::string(DataPathName(p)));
      return absl::FailedPreconditionError(absl::StrCat(
          "group '", spec.name, "': ", EngineKindName(spec.kind), " engine ", e.url,
          " cannot receive over the ", absl::StrJoin(names, " or "), " data path that the ",
          TransportKindName(spec.transport), " transport needs"));
    }
    adapters.push_back(std::move(adapter));
    offset += e.ranks;
  }
  std::shared_ptr<WeightGroup> group(
      new WeightGroup(spec, EngineGroupName(spec.name, options.incarnation), std::move(feeds),
                      std::move(adapters), store, platform, factories, options.transport));
  if (previous != nullptr && previous->store_port != 0) {
    group->avoid_store_ports_.push_back(previous->store_port);
  }
  {
    std::lock_guard<std::mutex> lock(group->mu_);
    WSYNC_RETURN_IF_ERROR(group->MakeTransportLocked(group->AllEngines()));
  }
  if (previous != nullptr) group->TakeOver(*previous, platform, options, factories);
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
      const absl::Time now = absl::Now();
      if (state_ == GroupState::kReady || state_ == GroupState::kUpdating) {
        for (size_t i = 0; i < adapters_.size(); ++i) {
          const bool member = std::find(members_.begin(), members_.end(), i) != members_.end();
          if (!member && !BackingOffLocked(i, now)) outside.push_back(i);
        }
      }
      // An engine that became a member again is no longer watched.
      std::erase_if(left_out_health_, [&](const auto& entry) {
        return std::none_of(outside.begin(), outside.end(),
                            [&](size_t i) { return adapters_[i]->endpoint().url == entry.first; });
      });
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
      for (size_t k = 0; k < outside.size(); ++k) {
        const std::string& url = adapters_[outside[k]]->endpoint().url;
        const auto before = left_out_health_.find(url);
        if (heard[k].ok() && (before == left_out_health_.end() || !before->second.ok())) {
          WSYNC_LOG(Info, "group ", spec_.name, ": engine ", url,
                    " answers again; the next update forms the group with it");
        }
        left_out_health_[url] = heard[k];
      }
    }
    wait.lock();
  }
}

std::set<std::string> WeightGroup::AnsweringAgain() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> out;
  for (const auto& [url, heard] : left_out_health_) {
    if (heard.ok()) out.insert(url);
  }
  return out;
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
      engine_group_(std::move(engine_group)) {
  for (const auto& a : adapters_) bucket_rules_.Merge(a->Capabilities().bucket_rules);
}

std::vector<size_t> WeightGroup::AllEngines() const {
  std::vector<size_t> all(adapters_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
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

std::string WeightGroup::RestartNoteLocked(const std::string& url) const {
  return absl::StrCat("engine ", url,
                      " failed to join after wsyncd restarted and may still hold the group '",
                      ShownNames(stale_engine_groups_), "' an earlier wsyncd made: restart it");
}

absl::Status WeightGroup::MakeTransportLocked(const std::vector<size_t>& members) {
  TransportEnv env;
  env.engine_group = engine_group_;
  env.avoid_store_ports = avoid_store_ports_;
  // A store made again for the same group never takes the port engines were last sent to.
  if (store_port_ != 0) env.avoid_store_ports.push_back(store_port_);
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
    NumberRanksLocked(members_);
    return made.status();
  }
  if (transport_) transport_->Release("the group's engines changed");
  transport_ = *std::move(made);
  members_ = members;
  return absl::OkStatus();
}

void WeightGroup::TakeOver(const GroupRecord& previous, Platform* platform,
                           const GroupOptions& options, const GroupFactories& factories) {
  last_version_ = previous.last_version;
  store_port_ = previous.store_port;
  // Engines the earlier wsyncd left paused mid-update, or still waiting for a full version, wait
  // on: they may hold tensors of two versions under the older one's label.
  std::set<std::string> current;
  for (const EngineSpec& e : spec_.engines) current.insert(e.url);
  std::map<std::string, std::string> waiting = previous.needs_full_version;
  if (!previous.open_version.empty()) {
    const std::string earlier = previous.last_version.empty()
                                    ? std::string("its earlier weights")
                                    : absl::StrCat("'", previous.last_version, "'");
    for (const EngineSpec& e : previous.spec.engines) {
      waiting.emplace(e.url, absl::StrCat("wsyncd stopped during update ", previous.open_update_id,
                                          " to version '", previous.open_version,
                                          "': the engine may hold tensors of '",
                                          previous.open_version, "' and of ", earlier));
    }
  }
  for (auto& [url, why] : waiting) {
    if (current.count(url) != 0) {
      WSYNC_LOG(Warning, "group ", spec_.name, ": engine ", url, " needs a full version: ", why);
      needs_full_[url] = why;
    } else {
      WSYNC_LOG(Warning, "group ", spec_.name, ": engine ", url,
                " is no longer one of its engines but was left paused (", why,
                "); resume it by hand (SGLang: POST /continue_generation; ",
                "LMDeploy: POST /wakeup; vLLM: POST /resume)");
    }
  }
  std::vector<std::string> names = previous.stale_engine_groups;
  if (!previous.engine_group.empty()) names.push_back(previous.engine_group);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (names.empty()) return;
  after_restart_ = true;
  stale_engine_groups_ = std::move(names);
  // Never formed: it only gives the earlier engines adapters to be asked through.
  // Never formed, so it needs no quorum (and the record's engines may have been cut to those
  // still allowed, fewer than its quorum).
  GroupSpec stale_spec = previous.spec;
  stale_spec.quorum = 0;
  auto stale = Create(stale_spec, platform, options, factories);
  if (!stale.ok()) {
    WSYNC_LOG(Warning, "group ", spec_.name,
              ": cannot ask the earlier engines to drop the group(s) '",
              ShownNames(stale_engine_groups_), "': ", stale.status().message());
    return;
  }
  stale_ = std::move(*stale);
}

absl::Status WeightGroup::PersistLocked() {
  if (store_ == nullptr) return absl::OkStatus();
  GroupRecord record;
  record.spec = spec_;
  record.engine_group = engine_group_;
  record.stale_engine_groups = stale_engine_groups_;
  record.store_port = store_port_;
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

void WeightGroup::LeaveStaleLocked() {
  if (stale_ == nullptr) return;
  // Asked before every formation until one succeeds: an engine down now is asked again.
  for (const std::string& name : stale_engine_groups_) {
    const std::vector<absl::Status> results = stale_->transport_->LeaveStale(name);
    const std::string shown = ShownEngineGroup(name);
    for (size_t i = 0; i < results.size(); ++i) {
      const std::string& url = stale_->spec_.engines[i].url;
      if (results[i].ok()) {
        WSYNC_LOG(Info, "group ", spec_.name, ": engine ", url, " dropped the group '", shown,
                  "' an earlier wsyncd left");
      } else if (results[i].code() == absl::StatusCode::kUnimplemented) {
        stale_notes_[url] = absl::StrCat(
            "engine ", url, " has no route to drop the group '", shown,
            "' an earlier wsyncd left; if it still holds it, it refuses to join: restart it");
        WSYNC_LOG(Warning, "group ", spec_.name, ": ", stale_notes_[url]);
      } else {
        // Most often the engine held no such group (it restarted too, or dropped it at an
        // earlier try), or is down.
        WSYNC_LOG(Info, "group ", spec_.name, ": engine ", url, ": dropping the group '", shown,
                  "' an earlier wsyncd left: ", RedactEngineGroupTokens(results[i].message()));
      }
    }
  }
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
  set_aside_.clear();
  return FormLocked();
}

void WeightGroup::SetAsideLocked(size_t i, const absl::Status& why, bool back_off) {
  const std::string& url = adapters_[i]->endpoint().url;
  WSYNC_LOG(Warning, "group ", spec_.name, ": going on without engine ", url, " (quorum ",
            engines_needed(), " of ", adapters_.size(), "): ", why.message());
  set_aside_[url] = why;
  // What is known of it until the background check hears from it.
  left_out_health_[url] = why;
  if (!back_off) return;
  // An engine that answers its probe but fails to join or to pause would otherwise make every
  // update form the group again (on a broadcast: a new NCCL group, and a wait for its join).
  Retry& retry = retry_[url];
  retry.backoff = retry.backoff == absl::ZeroDuration()
                      ? kFirstRetry
                      : std::min(retry.backoff * 2, kLongestRetry);
  retry.at = absl::Now() + retry.backoff;
}

bool WeightGroup::BackingOffLocked(size_t i, absl::Time now) const {
  auto it = retry_.find(adapters_[i]->endpoint().url);
  return it != retry_.end() && it->second.at > now;
}

std::vector<size_t> WeightGroup::RetryableLocked() {
  const absl::Time now = absl::Now();
  std::vector<size_t> retryable;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (!BackingOffLocked(i, now)) retryable.push_back(i);
  }
  if (retryable.size() < engines_needed()) return AllEngines();
  NoteBackingOffLocked(now);
  return retryable;
}

void WeightGroup::NoteBackingOffLocked(absl::Time now) {
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (!BackingOffLocked(i, now)) continue;
    const Retry& retry = retry_.at(adapters_[i]->endpoint().url);
    set_aside_[adapters_[i]->endpoint().url] = absl::UnavailableError(
        absl::StrCat("it failed to join or to pause; tried again in ",
                     absl::FormatDuration(absl::Trunc(retry.at - now, absl::Seconds(1)))));
  }
}

namespace {

// UNAVAILABLE: a quorum group has too few engines left, each left-out one named with why.
absl::Status TooFewEngines(const GroupSpec& spec, size_t needed, size_t left,
                           const std::map<std::string, absl::Status>& set_aside) {
  std::vector<std::string> why;
  for (const auto& [url, status] : set_aside)
    why.push_back(absl::StrCat(url, ": ", status.message()));
  return absl::UnavailableError(absl::StrCat("group '", spec.name, "' needs ", needed, " of its ",
                                             spec.engines.size(), " engines and ", left,
                                             " are left; without ", absl::StrJoin(why, "; ")));
}

}  // namespace

absl::Status WeightGroup::FormLocked(std::vector<size_t> candidates) {
  if (candidates.empty()) candidates = quorum_group() ? RetryableLocked() : AllEngines();
  state_ = GroupState::kForming;
  error_.clear();
  // Before any init: an engine still holding the earlier wsyncd's group refuses to join.
  LeaveStaleLocked();
  auto fail = [&](absl::Status s, bool joining = false) {
    std::vector<std::string> notes;
    const std::vector<std::string> failed =
        joining && after_restart_ ? transport_->EnginesFailedToJoin() : std::vector<std::string>();
    if (!failed.empty()) {
      // The earlier wsyncd's group may still be held where an engine failed to join: by name,
      // each of those engines needs a restart (the rest joined, so they hold nothing stale).
      for (size_t i : members_) needs_restart_.erase(adapters_[i]->endpoint().url);
      for (const std::string& url : failed) {
        auto noted = stale_notes_.find(url);
        needs_restart_[url] = noted != stale_notes_.end() ? noted->second : RestartNoteLocked(url);
        notes.push_back(needs_restart_[url]);
      }
    } else {
      for (const auto& [url, note] : stale_notes_) notes.push_back(note);
    }
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
        SetAsideLocked(candidates[k], probes[k]);
      }
    }
    candidates = std::move(answered);
    if (candidates.size() < engines_needed()) {
      return fail(TooFewEngines(spec_, engines_needed(), candidates.size(), set_aside_));
    }
  }
  // Recorded before the engines init it, so a wsyncd that dies from here on leaves a record of
  // the group they may hold.
  if (absl::Status s = PersistLocked(); !s.ok()) return fail(s);
  for (;;) {
    if (candidates != members_) {
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
      const std::string& url = adapters_[i]->endpoint().url;
      if (std::find(failed.begin(), failed.end(), url) == failed.end()) {
        joined.push_back(i);
        continue;
      }
      SetAsideLocked(
          i, absl::Status(formed.code(), absl::StrCat("it failed to join: ", formed.message())),
          /*back_off=*/true);
      if (after_restart_) needs_restart_[url] = RestartNoteLocked(url);
    }
    if (joined.size() < engines_needed()) return fail(formed, /*joining=*/true);
    candidates = std::move(joined);
  }
  stale_notes_.clear();
  for (size_t i : members_) {
    const std::string& url = adapters_[i]->endpoint().url;
    needs_restart_.erase(url);
    set_aside_.erase(url);
    retry_.erase(url);
  }
  // Every engine joined this incarnation's group: none holds an earlier one any more. Recorded
  // again only when that, or the store's port, changed what the record says. (An engine a
  // quorum group formed without is asked to drop them again before the next formation.)
  bool changed = false;
  if (members_.size() == adapters_.size()) {
    after_restart_ = false;
    changed = !stale_engine_groups_.empty();
    stale_.reset();
    stale_engine_groups_.clear();
  }
  if (const uint16_t port = StorePort(transport_->rendezvous()); port != 0 && port != store_port_) {
    store_port_ = port;
    changed = true;
  }
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
    for (const auto& [url, why] : needs_full_) {
      WSYNC_LOG(Warning, "group ", spec_.name, " destroyed while engine ", url,
                " waits, paused, for a full version (", why,
                "); resume it by hand (SGLang: POST /continue_generation; ",
                "LMDeploy: POST /wakeup; vLLM: POST /resume)");
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
  set_aside_.clear();
  reached_.clear();
  // The engines a quorum group forms with again (empty: FormLocked's own choice), and those of
  // them the background check heard answer again.
  std::vector<size_t> form_with, coming_back;
  if (quorum_group() && state_ == GroupState::kReady && members_.size() < adapters_.size()) {
    // Engines an earlier update went on without: if the background check heard one answer, the
    // group forms again to take it back. No engine is asked anything here: an engine that is
    // down must not cost the update its control timeout. One that failed to join or to pause
    // is tried only once its back-off has passed.
    const absl::Time now = absl::Now();
    std::vector<size_t> still_out;
    for (size_t i = 0; i < adapters_.size(); ++i) {
      const bool member = std::find(members_.begin(), members_.end(), i) != members_.end();
      if (member || BackingOffLocked(i, now)) continue;
      auto heard = left_out_health_.find(adapters_[i]->endpoint().url);
      if (heard != left_out_health_.end() && heard->second.ok()) {
        coming_back.push_back(i);
        left_out_health_.erase(heard);
      } else {
        still_out.push_back(i);
      }
    }
    // Those still out are set aside with what was last heard; only the members and those heard
    // again are asked to form.
    for (size_t i : still_out) {
      auto heard = left_out_health_.find(adapters_[i]->endpoint().url);
      SetAsideLocked(i, heard != left_out_health_.end()
                            ? heard->second
                            : absl::UnavailableError("not heard from since it was left out"));
    }
    NoteBackingOffLocked(now);
    if (!coming_back.empty()) {
      WSYNC_LOG(Info, "group ", spec_.name, ": an engine it went without answers again");
      form_with = members_;
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
      auto aside = set_aside_.find(adapters_[i]->endpoint().url);
      if (aside != set_aside_.end()) SetAsideLocked(i, aside->second, /*back_off=*/true);
    }
    if (!formed.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "group '", spec_.name, "' is broken and re-forming it failed: ", formed.message()));
    }
  }
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
  for (size_t i : members_) {
    const std::string& url = adapters_[i]->endpoint().url;
    if (set_aside_.count(url) == 0 && adapters_[i]->BeginLeavesWeightsUndefined()) {
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
  const std::vector<size_t> members = members_;
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
      SetAsideLocked(members[k], results[k], /*back_off=*/true);
    }
  }
  if (kept.size() == members.size()) return absl::OkStatus();
  if (kept.size() < engines_needed()) {
    return TooFewEngines(spec_, engines_needed(), kept.size(), set_aside_);
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
    for (size_t i : members_) {
      const std::string& url = adapters_[i]->endpoint().url;
      if (set_aside_.count(url) == 0 && dropped.count(url) == 0 && reached_.insert(url).second) {
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

absl::Status WeightGroup::FinishUpdate(const UpdateInfo& update, absl::Time data_deadline,
                                       std::vector<EngineOutcome>* outcomes) {
  auto outcome = [&](size_t i, absl::Status status) {
    return EngineOutcome{adapters_[i]->endpoint().url, std::move(status),
                         adapters_[i]->probed_version(), ""};
  };
  // The data path ends first: an engine records the version only once its weights are whole.
  if (absl::Status s = transport_->FinishBuckets(data_deadline); !s.ok()) {
    for (size_t i = 0; i < adapters_.size(); ++i) outcomes->push_back(outcome(i, s));
    MarkBroken(s);
    AbortUpdate(std::string(s.message()), outcomes);
    return s;
  }
  // Per engine: how its update ended. Those the update went on without (set aside before the
  // first bucket, or dropped by the transport after a failed one) are not asked to commit.
  std::vector<absl::Status> results(adapters_.size());
  std::vector<size_t> finishers;
  // Engines the transport dropped mid-update: each may hold part of this version.
  std::map<std::string, absl::Status> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = transport_->DroppedEngines();
    for (const auto& [url, why] : dropped) set_aside_.emplace(url, why);
    std::vector<bool> member(adapters_.size(), false);
    for (size_t i : members_) member[i] = true;
    for (size_t i = 0; i < adapters_.size(); ++i) {
      auto aside = set_aside_.find(adapters_[i]->endpoint().url);
      if (member[i] && aside == set_aside_.end()) {
        finishers.push_back(i);
        continue;
      }
      const absl::Status why = aside != set_aside_.end()
                                   ? aside->second
                                   : absl::UnavailableError("not in the group's formation");
      results[i] =
          absl::Status(why.code(), absl::StrCat("left out of this update: ", why.message()));
    }
  }
  const std::vector<absl::Status> finished =
      OnEachEngine(AdaptersAt(finishers), [&](EngineAdapter& a) { return a.FinishUpdate(update); });
  for (size_t k = 0; k < finishers.size(); ++k) results[finishers[k]] = finished[k];
  const size_t first_outcome = outcomes->size();
  for (size_t i = 0; i < adapters_.size(); ++i) outcomes->push_back(outcome(i, results[i]));
  std::vector<size_t> committed;
  std::vector<EngineCommitFacts> facts(adapters_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < adapters_.size(); ++i) {
      const std::string& url = adapters_[i]->endpoint().url;
      if (results[i].ok()) committed.push_back(i);
      facts[i].committed = results[i].ok();
      facts[i].reached = reached_.count(url) != 0;
      facts[i].waiting = needs_full_.count(url) != 0;
    }
  }
  // All or nothing, unless the group's quorum says how many must commit (PlanCommit).
  CommitPlan plan = PlanCommit(facts, engines_needed());
  const bool commit_ok = plan.commit_ok;
  // The engines' own checksums, compared while the update still holds the group (so no other
  // update pauses the engines under the checkers) and after they resumed (vLLM's checker
  // refuses a paused engine). Only engines that committed are compared.
  CommittedWeights weights;
  weights.differs.assign(adapters_.size(), false);
  if (spec_.check_weights && commit_ok) {
    weights = CheckCommittedWeights(update, committed, outcomes, first_outcome);
  }
  WeightsCheck& check = weights.check;
  const std::vector<bool>& differs = weights.differs;
  const bool differing_serves = weights.differing_serves;
  // A quorum group's version landed without some engines: they must not serve what they hold
  // (an older version, or part of this one), so each is paused where it answers and waits for a
  // full version.
  std::vector<size_t> missed;
  std::vector<std::string> errors;
  absl::Status first;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (!results[i].ok()) {
      missed.push_back(i);
      errors.push_back(absl::StrCat(adapters_[i]->endpoint().url, ": ", results[i].message()));
      if (first.ok()) first = results[i];
    }
  }
  // The engines that hold the version: committed, and (with the check) not differing.
  for (size_t i = 0; i < adapters_.size(); ++i) facts[i].differs = differs[i];
  plan = PlanCommit(facts, engines_needed());
  const size_t kept = plan.holding.size();
  const bool landed =
      CommitLanded(plan, !check.error.empty(), quorum_group(), engines_needed(), differing_serves);
  if (commit_ok && !missed.empty()) {
    const std::vector<absl::Status> paused =
        OnEachEngine(AdaptersAt(missed), [](EngineAdapter& a) { return a.PauseGeneration(); });
    for (size_t k = 0; k < missed.size(); ++k) {
      if (paused[k].ok()) continue;
      // Most often it is down; if not, it serves an older version than the group's.
      const size_t i = missed[k];
      results[i] = absl::Status(
          results[i].code(),
          absl::StrCat(results[i].message(), "; pausing it failed too: ", paused[k].message()));
      (*outcomes)[first_outcome + i].status = results[i];
      errors[k] = absl::StrCat(adapters_[i]->endpoint().url, ": ", results[i].message());
    }
  }
  // An update that failed at the commit: an engine it reached that did not commit may hold part
  // of this version, and one that committed holds a version the group did not take, so both stay
  // paused and wait for a full one; an engine it never reached (set aside before any bucket)
  // holds the group's version whole and resumes.
  // (An engine that committed, and resumed, a version the group did not take would serve
  // another version than the others: it is paused too.)
  const std::vector<EngineAdapter*> resume_set_aside = AdaptersAt(plan.resume);
  if (!commit_ok) {
    const std::vector<size_t>& partial = plan.partial;
    const std::vector<absl::Status> paused =
        OnEachEngine(AdaptersAt(partial), [](EngineAdapter& a) {
          a.AbandonUpdate();
          return a.PauseGeneration();
        });
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = 0; k < partial.size(); ++k) {
      const size_t i = partial[k];
      std::string why =
          results[i].ok()
              ? absl::StrCat("it committed version '", update.version, "' of update ",
                             update.update_id, ", which did not land on the group (",
                             committed.size(), " of ", adapters_.size(),
                             " engines committed): paused so that the group does not serve two "
                             "versions")
              : absl::StrCat("update ", update.update_id, " to version '", update.version,
                             "' reached it and did not commit: it may hold part of it (",
                             SanitizePeerText(results[i].message()), ")");
      if (!paused[k].ok()) absl::StrAppend(&why, "; pausing it failed: ", paused[k].message());
      MarkPartialLocked(i, why, nullptr);
      (*outcomes)[first_outcome + i].needs_full_version = needs_full_[adapters_[i]->endpoint().url];
    }
  }
  OnEachEngine(resume_set_aside, [](EngineAdapter& a) { return a.ResumeGeneration(); });
  std::lock_guard<std::mutex> lock(mu_);
  transport_->EndUpdate("the update finished");
  update_open_ = false;
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
  ++updates_;
  // A complete update landed on the engines that finished it: they hold one version again.
  for (size_t i : plan.holding) needs_full_.erase(adapters_[i]->endpoint().url);
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const std::string& url = adapters_[i]->endpoint().url;
    if (differs[i]) {
      const std::string& note = (*outcomes)[first_outcome + i].weights_check;
      needs_full_[url] = absl::StrCat("after version '", update.version, "' its weights ", note);
    }
  }
  std::string quorum_note;
  if (commit_ok && !missed.empty()) {
    quorum_note = absl::StrCat("version '", update.version, "' committed on ", kept, " of ",
                               adapters_.size(), " engines (quorum ", engines_needed(), ")");
    for (size_t i : missed) {
      needs_full_[adapters_[i]->endpoint().url] =
          absl::StrCat("missed version '", update.version, "': ", results[i].message());
    }
    WSYNC_LOG(Warning, "group ", spec_.name, ": ", quorum_note, "; without ",
              absl::StrJoin(errors, "; "));
  }
  open_update_ = UpdateInfo{};
  set_aside_.clear();
  if (commit_ok) last_version_ = update.version;
  reached_.clear();
  for (size_t i = 0; i < adapters_.size(); ++i) {
    auto waiting = needs_full_.find(adapters_[i]->endpoint().url);
    if (waiting != needs_full_.end())
      (*outcomes)[first_outcome + i].needs_full_version = waiting->second;
  }
  if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
  if (!commit_ok) {
    error_ = absl::StrJoin(errors, "; ");
    if (quorum_group()) {
      return absl::Status(
          first.code(),
          absl::StrCat("commit failed: ", committed.size(), " of ", adapters_.size(),
                       " engines committed, quorum ", engines_needed(), "; ", error_));
    }
    return absl::Status(first.code(), absl::StrCat("commit failed on ", error_));
  }
  if (!check.error.empty()) {
    error_ = check.error;
    WSYNC_LOG(Warning, "group ", spec_.name, ": weights check after '", update.version,
              "': ", check.error);
    if (!landed) {
      return absl::DataLossError(absl::StrCat("the engines' weights differ after version '",
                                              update.version, "': ", check.error,
                                              "; push the whole version again"));
    }
  }
  if (!quorum_note.empty()) {
    error_ = absl::StrCat(quorum_note, "; without ", absl::StrJoin(errors, "; "));
  }
  return absl::OkStatus();
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
  set_aside_.clear();
  if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting = needs_full_;
    restarts = needs_restart_;
    for (const auto& a : adapters_) endpoints.push_back(a->endpoint());
  }
  std::vector<EngineRow> rows(adapters_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    threads.emplace_back([&, i] {
      const EngineEndpoint& e = endpoints[i];
      auto it = waiting.find(e.url);
      auto restart = restarts.find(e.url);
      rows[i] = EngineRow{spec_.name,
                          spec_.kind,
                          e,
                          adapters_[i]->Health(),
                          it == waiting.end() ? std::string() : it->second,
                          restart == restarts.end() ? std::string() : restart->second};
    });
  }
  for (auto& t : threads) t.join();
  return rows;
}

}  // namespace wsync
