#include "daemon/core/weight_group.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"

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

DataPath DataPathOf(TransportKind transport) {
  switch (transport) {
    case TransportKind::kBroadcast:
      return DataPath::kBroadcast;
  }
  return DataPath::kBroadcast;
}

namespace {

std::vector<EngineAdapter*> Pointers(const std::vector<std::unique_ptr<EngineAdapter>>& owned) {
  std::vector<EngineAdapter*> out;
  for (const auto& a : owned) out.push_back(a.get());
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<WeightGroup>> WeightGroup::Create(GroupSpec spec, Platform* platform,
                                                                 GroupOptions options,
                                                                 const GroupFactories& factories) {
  WSYNC_RETURN_IF_ERROR(ValidateGroupSpec(spec));
  const DataPath path = DataPathOf(spec.transport);
  std::vector<std::unique_ptr<EngineAdapter>> adapters;
  uint32_t offset = 1;
  for (const EngineSpec& e : spec.engines) {
    WSYNC_ASSIGN_OR_RETURN(
        std::unique_ptr<EngineAdapter> adapter,
        factories.adapter(spec, EngineEndpoint{e.url, e.ranks, offset}, options.timeouts));
    if (!adapter->Capabilities().Supports(path)) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec.name, "': ", EngineKindName(spec.kind), " engine ", e.url,
                       " cannot receive over the ", DataPathName(path), " data path that the ",
                       TransportKindName(spec.transport), " transport needs"));
    }
    adapters.push_back(std::move(adapter));
    offset += e.ranks;
  }
  std::shared_ptr<WeightGroup> group(new WeightGroup(spec, std::move(adapters)));
  TransportEnv env;
  env.spec = std::move(spec);
  env.platform = platform;
  env.adapters = group->adapter_ptrs_;
  env.options = options.transport;
  WeightGroup* raw = group.get();
  env.on_bucket_failed = [raw](const absl::Status& s) { raw->MarkBroken(s); };
  WSYNC_ASSIGN_OR_RETURN(group->transport_, factories.transport(std::move(env)));
  return group;
}

WeightGroup::WeightGroup(GroupSpec spec, std::vector<std::unique_ptr<EngineAdapter>> adapters)
    : spec_(std::move(spec)), adapters_(std::move(adapters)), adapter_ptrs_(Pointers(adapters_)) {
  for (const auto& a : adapters_) bucket_rules_.Merge(a->Capabilities().bucket_rules);
}

WeightGroup::~WeightGroup() {
  std::lock_guard<std::mutex> lock(mu_);
  if (transport_) transport_->Release("group torn down");
}

absl::Status WeightGroup::Form() {
  std::lock_guard<std::mutex> lock(mu_);
  return FormLocked();
}

absl::Status WeightGroup::FormLocked() {
  state_ = GroupState::kForming;
  error_.clear();
  auto fail = [&](absl::Status s) {
    error_ = std::string(s.message());
    state_ = GroupState::kBroken;
    WSYNC_LOG(Warning, "group ", spec_.name, ": formation failed: ", s.message());
    return s;
  };
  if (absl::Status s =
          FirstError(OnEachEngine(adapter_ptrs_, [](EngineAdapter& a) { return a.Probe(); }));
      !s.ok()) {
    return fail(s);
  }
  if (absl::Status s = transport_->Form(); !s.ok()) return fail(s);
  state_ = GroupState::kReady;
  WSYNC_LOG(Info, "group ", spec_.name, " ready: ", transport_->Describe());
  return absl::OkStatus();
}

absl::Status WeightGroup::Destroy() {
  std::lock_guard<std::mutex> lock(mu_);
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
    if (absl::Status s = FormLocked(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "group '", spec_.name, "' is broken and re-forming it failed: ", s.message()));
    }
  }
  auto resume_all = [&] {
    OnEachEngine(adapter_ptrs_, [](EngineAdapter& a) { return a.ResumeGeneration(); });
  };
  if (absl::Status s = FirstError(
          OnEachEngine(adapter_ptrs_, [](EngineAdapter& a) { return a.PauseGeneration(); }));
      !s.ok()) {
    resume_all();
    return s;
  }
  if (absl::Status s = FirstError(
          OnEachEngine(adapter_ptrs_, [&](EngineAdapter& a) { return a.BeginUpdate(update); }));
      !s.ok()) {
    resume_all();
    return s;
  }
  if (absl::Status s = transport_->BeginUpdate(update); !s.ok()) {
    resume_all();
    return s;
  }
  state_ = GroupState::kUpdating;
  update_open_ = true;
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != GroupState::kUpdating) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec_.name, "' is ", GroupStateName(state_), ", not updating"));
    }
  }
  // Outside the lock: a launch may wait on the engines, and its failure hook takes the lock.
  return transport_->StartBucket(sources, manifest, context, deadline);
}

void WeightGroup::MarkBroken(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = GroupState::kBroken;
    error_ = std::string(status.message());
  }
  WSYNC_LOG(Warning, "group ", spec_.name, ": bucket failed, group broken: ", status.message());
}

absl::Status WeightGroup::FinishUpdate(const UpdateInfo& update,
                                       std::vector<EngineOutcome>* outcomes) {
  std::vector<absl::Status> results =
      OnEachEngine(adapter_ptrs_, [&](EngineAdapter& a) { return a.FinishUpdate(update); });
  std::vector<std::string> errors;
  absl::Status first;
  for (size_t i = 0; i < results.size(); ++i) {
    outcomes->push_back(EngineOutcome{adapters_[i]->endpoint().url, results[i]});
    if (!results[i].ok()) {
      errors.push_back(absl::StrCat(adapters_[i]->endpoint().url, ": ", results[i].message()));
      if (first.ok()) first = results[i];
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  transport_->EndUpdate("the update finished");
  update_open_ = false;
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
  ++updates_;
  if (!errors.empty()) {
    error_ = absl::StrJoin(errors, "; ");
    return absl::Status(first.code(), absl::StrCat("commit failed on ", error_));
  }
  last_version_ = update.version;
  return absl::OkStatus();
}

void WeightGroup::AbortUpdate(const std::string& reason) {
  WSYNC_LOG(Info, "group ", spec_.name, ": update aborted: ", reason);
  {
    std::lock_guard<std::mutex> lock(mu_);
    transport_->EndUpdate(absl::StrCat("update aborted: ", reason));
  }
  OnEachEngine(adapter_ptrs_, [](EngineAdapter& a) { return a.ResumeGeneration(); });
  std::lock_guard<std::mutex> lock(mu_);
  update_open_ = false;
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
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
  return s;
}

std::vector<EngineRow> WeightGroup::ProbeEngines() {
  std::vector<EngineRow> rows(adapters_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    threads.emplace_back([&, i] {
      rows[i] = EngineRow{spec_.name, adapters_[i]->endpoint(), adapters_[i]->Health()};
    });
  }
  for (auto& t : threads) t.join();
  return rows;
}

}  // namespace wsync
