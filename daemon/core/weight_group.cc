#include "daemon/core/weight_group.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
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

absl::Status ValidateGroupSpec(const GroupSpec& spec) {
  if (spec.name.empty() || spec.name.size() > 64) {
    return absl::InvalidArgumentError("group name must be 1..64 characters");
  }
  for (char c : spec.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "group name '", spec.name, "' may only contain letters, digits, '_', '-' and '.'"));
    }
  }
  if (spec.engines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' names no engine"));
  }
  if (spec.kind != EngineKind::kSglang) {
    return absl::UnimplementedError(absl::StrCat("engine kind ", EngineKindName(spec.kind),
                                                 " is not supported yet (sglang is)"));
  }
  uint32_t ranks = 0;
  for (const EngineSpec& e : spec.engines) {
    if (e.url.rfind("http://", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine url '", e.url, "' must start with http://"));
    }
    if (e.ranks == 0) {
      return absl::InvalidArgumentError(absl::StrCat("engine ", e.url, " declares 0 ranks"));
    }
    ranks += e.ranks;
  }
  if (ranks + 1 > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "' has ", ranks + 1,
                     " ranks; torch switches to scalable NCCL init above 128, which is not "
                     "supported"));
  }
  return absl::OkStatus();
}

std::string WeightGroup::UniqueIdKey(const std::string& group_name) {
  return absl::StrCat("/", group_name, "/", group_name, "//cuda//0");
}

WeightGroup::WeightGroup(GroupSpec spec, Platform* platform, GroupOptions options)
    : spec_(std::move(spec)), platform_(platform), options_(std::move(options)) {
  uint32_t offset = 1;
  for (const EngineSpec& e : spec_.engines) {
    adapters_.push_back(MakeEngineAdapter(spec_.kind, EngineEndpoint{e.url, e.ranks, offset},
                                          options_.timeouts, spec_.format));
    offset += e.ranks;
  }
  world_size_ = offset;
  // Fixed for the group's life; every bucket hands them to its transfer.
  std::vector<std::string> parts;
  for (const auto& a : adapters_) {
    adapter_ptrs_.push_back(a.get());
    const EngineEndpoint& e = a->endpoint();
    parts.push_back(e.ranks == 1 ? absl::StrCat("rank ", e.rank_offset, " = ", e.url)
                                 : absl::StrCat("ranks ", e.rank_offset, "-",
                                                e.rank_offset + e.ranks - 1, " = ", e.url));
  }
  rank_map_ = absl::StrJoin(parts, ", ");
}

WeightGroup::~WeightGroup() {
  std::lock_guard<std::mutex> lock(mu_);
  TearDownLocked();
}

std::vector<absl::Status> WeightGroup::OnEngines(
    const std::function<absl::Status(EngineAdapter&)>& fn) {
  std::vector<absl::Status> results(adapters_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = fn(*adapters_[i]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

void WeightGroup::DestroyOnEnginesLocked() {
  // torch finalizes an engine's NCCL communicator together with its peers, so the engines'
  // destroy calls block until rank 0 finalizes too: both run at once.
  std::unique_ptr<RootCommunicator> comm = std::move(comm_);
  std::thread finalize([&comm] { comm.reset(); });
  std::vector<absl::Status> results =
      OnEngines([&](EngineAdapter& a) { return a.DestroyGroup(spec_.name); });
  finalize.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) WSYNC_LOG(Warning, "group ", spec_.name, ": destroy: ", s.message());
  }
}

void WeightGroup::CloseChannelsLocked(absl::string_view why) {
  for (const auto& channel : channels_) channel->Cancel(why);
  channels_.clear();
}

void WeightGroup::TearDownLocked() {
  // Before the communicator goes: an answer arriving later would abort it.
  CloseChannelsLocked("group torn down");
  if (comm_) comm_->Abort("group torn down");
  comm_.reset();
  if (store_) store_->ErasePrefix(absl::StrCat("/", spec_.name, "/"));
  store_.reset();
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
    TearDownLocked();
    WSYNC_LOG(Warning, "group ", spec_.name, ": formation failed: ", s.message());
    return s;
  };
  std::vector<absl::Status> probes = OnEngines([](EngineAdapter& a) { return a.Probe(); });
  for (const absl::Status& s : probes) {
    if (!s.ok()) return fail(s);
  }
  auto store = TcpStoreServer::Start(options_.bind_address, 0);
  if (!store.ok()) return fail(store.status());
  store_ = std::move(*store);
  auto comm = platform_->CreateRootCommunicator(spec_.device, static_cast<int>(world_size_));
  if (!comm.ok()) return fail(comm.status());
  comm_ = std::move(*comm);
  // Published before any engine is asked to join: engines fetch it at their first collective.
  store_->Set(UniqueIdKey(spec_.name), comm_->unique_id());
  Rendezvous rdv{options_.advertise_address, store_->port(), world_size_, spec_.name};
  std::vector<absl::Status> inits = OnEngines([&](EngineAdapter& a) { return a.InitGroup(rdv); });
  std::vector<std::string> errors;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (size_t i = 0; i < inits.size(); ++i) {
    if (inits[i].ok()) continue;
    errors.push_back(std::string(inits[i].message()));
    if (code == absl::StatusCode::kOk) code = inits[i].code();
  }
  if (!errors.empty()) {
    // Engines that did join must drop the group, or they refuse the next init under this name.
    for (size_t i = 0; i < inits.size(); ++i) {
      if (inits[i].ok()) (void)adapters_[i]->DestroyGroup(spec_.name);
    }
    return fail(absl::Status(
        code, absl::StrCat("group '", spec_.name,
                           "': engines failed to join: ", absl::StrJoin(errors, "; "))));
  }
  if (absl::Status s = WaitForRegistration(); !s.ok()) return fail(s);
  state_ = GroupState::kReady;
  WSYNC_LOG(Info, "group ", spec_.name, " ready: world ", world_size_, ", store ",
            options_.advertise_address, ":", store_->port(), ", ", comm_->Describe(), ", ",
            rank_map_);
  return absl::OkStatus();
}

absl::Status WeightGroup::WaitForRegistration() {
  // Each engine rank's TCPStore client ADDs "init/" when it connects; fewer than world-1 means an
  // engine answered its init route without all of its ranks reaching the store.
  const absl::Time deadline = absl::Now() + options_.registration_timeout;
  while (store_->InitCount() < static_cast<int64_t>(world_size_ - 1)) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "group '", spec_.name, "': only ", store_->InitCount(), " of ", world_size_ - 1,
          " engine ranks registered with the store at ", options_.advertise_address, ":",
          store_->port(), " (connected pids: ", absl::StrJoin(store_->ConnectedPids(), ","), ")"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status WeightGroup::Destroy() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == GroupState::kUpdating) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", spec_.name, "' is being updated; abort the update first"));
  }
  if (state_ == GroupState::kReady || state_ == GroupState::kBroken) {
    // A broken group may still be held by engines that survived; they must drop it, or they
    // refuse the next group of this name.
    DestroyOnEnginesLocked();
  }
  TearDownLocked();
  state_ = GroupState::kDestroyed;
  return absl::OkStatus();
}

absl::Status WeightGroup::BeginUpdate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == GroupState::kDestroyed) {
    return absl::NotFoundError(absl::StrCat("group '", spec_.name, "' was destroyed"));
  }
  if (state_ == GroupState::kUpdating) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", spec_.name, "' is already being updated"));
  }
  if (state_ == GroupState::kReady && store_) {
    // Every engine rank keeps its store connection for the life of its process group; one that
    // closed means an engine restarted (or died) since the group formed, and its replacement does
    // not hold the group. Re-forming now spares the update a failure.
    const size_t holding = store_->ConnectedPids().size();
    if (holding + 1 < world_size_) {
      WSYNC_LOG(Info, "group ", spec_.name, ": only ", holding, " of ", world_size_ - 1,
                " engine ranks still hold their store connection");
      state_ = GroupState::kBroken;
      error_ = "an engine rank closed its store connection (engine restarted or died)";
    }
  }
  if (state_ == GroupState::kBroken || state_ == GroupState::kForming) {
    WSYNC_LOG(Info, "group ", spec_.name, " is ", GroupStateName(state_),
              "; re-forming it before the update");
    // The engines may still hold the old group; they refuse to init one of the same name.
    DestroyOnEnginesLocked();
    TearDownLocked();
    if (absl::Status s = FormLocked(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "group '", spec_.name, "' is broken and re-forming it failed: ", s.message()));
    }
  }
  std::vector<absl::Status> paused =
      OnEngines([](EngineAdapter& a) { return a.PauseGeneration(); });
  for (const absl::Status& s : paused) {
    if (!s.ok()) {
      OnEngines([](EngineAdapter& a) { return a.ResumeGeneration(); });
      return s;
    }
  }
  CloseChannelsLocked("a new update began");
  for (EngineAdapter* a : adapter_ptrs_) {
    channels_.push_back(std::make_shared<UpdateChannel>(a->endpoint().url));
  }
  state_ = GroupState::kUpdating;
  return absl::OkStatus();
}

absl::Status WeightGroup::ValidateBucket(const BucketManifest& manifest) const {
  for (const auto& a : adapters_) WSYNC_RETURN_IF_ERROR(a->ValidateBucket(manifest));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BucketTransfer>> WeightGroup::StartBucket(
    SlotMemory& slot, const void* base, const BucketManifest& manifest, absl::Time deadline) {
  RootCommunicator* comm;
  std::vector<std::shared_ptr<UpdateChannel>> channels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != GroupState::kUpdating || !comm_) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", spec_.name, "' is ", GroupStateName(state_), ", not updating"));
    }
    comm = comm_.get();
    channels = channels_;
  }
  return BucketTransfer::Start(
      adapter_ptrs_, channels, comm, slot, base, manifest, spec_.name, rank_map_, deadline,
      [this](const absl::Status& s) { MarkBroken(s); }, [this] { return StoreReport(); });
}

std::string WeightGroup::StoreReport() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_) return "the group's store is gone";
  const std::string key = UniqueIdKey(spec_.name);
  std::vector<uint32_t> connected = store_->ConnectedPids();
  std::vector<uint32_t> fetched = store_->FetchersOf(key);
  std::vector<uint32_t> never;
  for (uint32_t pid : connected) {
    if (std::find(fetched.begin(), fetched.end(), pid) == fetched.end()) never.push_back(pid);
  }
  std::vector<std::string> unpublished = store_->UnpublishedWaits();
  if (never.empty() && unpublished.empty() && connected.size() + 1 >= world_size_) return "";
  std::string report = absl::StrCat("store ", options_.advertise_address, ":", store_->port(), ": ",
                                    connected.size(), " of ", world_size_ - 1,
                                    " engine ranks connected (pids ", absl::StrJoin(connected, ","),
                                    "), ", fetched.size(), " fetched the NCCL id ", key);
  if (!never.empty()) {
    absl::StrAppend(&report, "; pids ", absl::StrJoin(never, ","),
                    " joined the store but never fetched the id: an engine whose default process "
                    "group is bound to a device (device_id) builds this group with ncclCommSplit "
                    "and cannot join an external rank 0; restart it without device_id");
  }
  if (!unpublished.empty()) {
    absl::StrAppend(&report, "; ranks waited for keys never published (",
                    absl::StrJoin(unpublished, ", "), "): a group name or store prefix mismatch");
  }
  return report;
}

void WeightGroup::MarkBroken(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = GroupState::kBroken;
    error_ = std::string(status.message());
  }
  WSYNC_LOG(Warning, "group ", spec_.name, ": bucket failed, group broken: ", status.message());
}

absl::Status WeightGroup::FinishUpdate(const std::string& version,
                                       std::vector<EngineOutcome>* outcomes) {
  std::vector<absl::Status> results =
      OnEngines([&](EngineAdapter& a) { return a.FinishUpdate(version); });
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
  CloseChannelsLocked("the update finished");
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
  ++updates_;
  if (!errors.empty()) {
    error_ = absl::StrJoin(errors, "; ");
    return absl::Status(first.code(), absl::StrCat("commit failed on ", error_));
  }
  last_version_ = version;
  return absl::OkStatus();
}

void WeightGroup::AbortUpdate(const std::string& reason) {
  WSYNC_LOG(Info, "group ", spec_.name, ": update aborted: ", reason);
  {
    std::lock_guard<std::mutex> lock(mu_);
    CloseChannelsLocked(absl::StrCat("update aborted: ", reason));
  }
  OnEngines([](EngineAdapter& a) { return a.ResumeGeneration(); });
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
}

GroupSnapshot WeightGroup::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  GroupSnapshot s;
  s.spec = spec_;
  s.state = state_;
  s.world_size = world_size_;
  for (const auto& a : adapters_) s.endpoints.push_back(a->endpoint());
  if (store_) s.rendezvous = absl::StrCat(options_.advertise_address, ":", store_->port());
  s.last_version = last_version_;
  s.error = error_;
  s.updates = updates_;
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
