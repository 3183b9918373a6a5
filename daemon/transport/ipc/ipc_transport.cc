#include "daemon/transport/ipc/ipc_transport.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/fan_out.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "daemon/transport/ipc/stream_bucket.h"

namespace wsync {

IpcTransport::IpcTransport(TransportEnv env)
    : env_(std::move(env)), sockets_(env_.options.socket_dir) {
  for (EngineAdapter* a : env_.adapters) {
    urls_.push_back(a->endpoint().url);
    ranks_ += a->endpoint().ranks;
  }
}

IpcTransport::~IpcTransport() { EndUpdate("group torn down"); }

absl::Status IpcTransport::Form() {
  std::lock_guard<std::mutex> lock(mu_);
  formation_.reset();
  gpus_.clear();
  // Each engine takes the path the group picked for it (EngineAdapter::used_binding): the first
  // of this transport's paths it has a binding of.
  size_t streamed = 0;
  for (size_t i = 0; i < env_.adapters.size(); ++i) {
    const DataPathBinding* used = env_.adapters[i]->used_binding();
    const absl::string_view path = used == nullptr ? absl::string_view() : used->data_path();
    if (path == kCudaIpcDataPath) continue;
    if (path != kCudaIpcStreamDataPath) {
      return absl::UnimplementedError(absl::StrCat("group '", env_.spec.name, "': engine ",
                                                   env_.spec.engines[i].url,
                                                   " cannot load buckets over IPC"));
    }
    ++streamed;
  }
  if (streamed != 0 && streamed != env_.adapters.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", env_.spec.name, "': its engines take IPC buckets in different ways"));
  }
  streamed_ = streamed != 0;
  // A stream admits only the workers of the process serving the engine's port: one wsyncd cannot
  // find is refused now rather than at each update.
  for (size_t i = 0; streamed_ && i < env_.adapters.size(); ++i) {
    const std::string& url = env_.adapters[i]->endpoint().url;
    WSYNC_ASSIGN_OR_RETURN(const EngineProcess engine, sockets_.FindEngine(url));
    if (engine.servers.empty()) {
      WSYNC_LOG(Warning, "group '", env_.spec.name, "': engine ", url, " (", engine.Describe(),
                "): its stream sockets admit any process of uid ", engine.uid,
                ", since wsyncd cannot read which process serves the engine's port (run wsyncd "
                "as root or as the engine's user to admit only that process's descendants)");
    }
  }
  WSYNC_ASSIGN_OR_RETURN(auto gpus, RankFeedsOf(env_.spec, *env_.platform));
  gpus_ = std::move(gpus);
  formation_ = std::make_shared<IpcFormation>();
  return absl::OkStatus();
}

void IpcTransport::Disband() { Release("the group is disbanded"); }

void IpcTransport::Release(absl::string_view why) {
  channels_.CancelAll(why);
  std::lock_guard<std::mutex> lock(mu_);
  if (formation_) formation_->latch.Trip();
  formation_.reset();
}

std::vector<absl::Status> IpcTransport::LeaveStale(const std::string&) {
  return std::vector<absl::Status>(env_.adapters.size(), absl::OkStatus());
}

absl::Status IpcTransport::CheckFormed() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!formation_) return absl::FailedPreconditionError("the group is not formed");
  if (formation_->latch.tripped()) {
    return absl::FailedPreconditionError("a bucket of the last update failed");
  }
  return absl::OkStatus();
}

absl::Status IpcTransport::BeginUpdate(const UpdateInfo& update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!formation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", env_.spec.name, "' is not formed; form it first"));
  }
  channels_.Open(urls_);
  streams_.clear();
  drops_ = env_.engines_needed == 0 || streamed_
               ? nullptr
               : std::make_shared<EngineDrops>(env_.adapters.size(), env_.engines_needed);
  if (!streamed_) return absl::OkStatus();
  std::vector<std::shared_ptr<UpdateChannel>> channels = channels_.Current();
  const absl::Time deadline = absl::Now() + env_.options.registration_timeout;
  for (size_t i = 0; i < env_.adapters.size(); ++i) {
    std::vector<std::string> rank_gpus;
    for (const TrainerFeed& gpu : gpus_[i]) rank_gpus.push_back(gpu.gpu_uuid);
    auto stream = CheckpointEngineStream::Open(&sockets_, env_.adapters[i], channels[i], update,
                                               rank_gpus, deadline);
    if (!stream.ok()) {
      for (auto& s : streams_) s->Abort("another engine's stream failed to open");
      streams_.clear();
      channels_.CancelAll("the update failed to begin");
      return stream.status();
    }
    streams_.push_back(*std::move(stream));
  }
  return absl::OkStatus();
}

namespace {

// What an engine rank maps to read a bucket from one source: the allocation the slot is a region
// of (one per device for the regular slots, so an engine maps it once and every slot's bucket is
// an offset into it), or (zero copy) the trainer's allocation the bucket lies in as it is laid
// out. Either way the slot's event orders the trainer's writes (the client records it when the
// bucket is ready), and the slot is held until the answers.
IpcBucketView ViewOf(const BucketSource& source) {
  const SlotMemory& slot = *source.slot;
  IpcBucketView view{"",
                     slot.kind(),
                     slot.memory_handle(),
                     slot.allocation_bytes(),
                     slot.allocation_offset(),
                     slot.event_handle()};
  if (source.base != nullptr) {
    const SourceMemory& trainer = *source.base_memory;
    view.memory_kind = trainer.kind();
    view.memory_handle = trainer.memory_handle();
    view.allocation_bytes = trainer.bytes();
    view.offset = static_cast<uint64_t>(static_cast<const char*>(source.base) -
                                        static_cast<const char*>(trainer.data()));
  }
  return view;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BucketHandle>> IpcTransport::StartBucket(
    const std::vector<BucketSource>& sources, const BucketManifest& manifest,
    const BucketContext& context, absl::Time deadline) {
  for (const BucketSource& source : sources) {
    if (source.slot == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", env_.spec.name, "': an IPC bucket comes from slots"));
    }
    if (source.base != nullptr &&
        (source.base_memory == nullptr || source.base_memory->memory_handle().empty())) {
      return absl::InternalError(absl::StrCat(
          "group '", env_.spec.name, "': a bucket read in place without its allocation's handle"));
    }
  }
  std::shared_ptr<IpcFormation> formation;
  std::vector<std::vector<TrainerFeed>> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!formation_) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", env_.spec.name, "' is not formed"));
    }
    formation = formation_;
    gpus = gpus_;
  }
  std::vector<std::shared_ptr<UpdateChannel>> channels = channels_.Current();
  std::vector<std::shared_ptr<CheckpointEngineStream>> streams;
  bool streamed = false;
  std::shared_ptr<EngineDrops> drops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
    streamed = streamed_;
    drops = drops_;
  }
  if (channels.empty() || (streamed && streams.size() != env_.adapters.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", env_.spec.name, "': no update is open on the transport"));
  }
  // Built before anything is written: a bucket an adapter cannot describe, or a rank whose GPU has
  // no source, reaches no engine.
  std::vector<EngineRequest> requests;
  std::vector<std::vector<IpcBucketView>> stream_views;
  std::vector<SlotMemory*> producers;
  for (const BucketSource& source : sources) producers.push_back(source.slot);
  for (size_t i = 0; i < env_.adapters.size(); ++i) {
    std::vector<IpcBucketView> views;
    for (size_t rank = 0; rank < gpus[i].size(); ++rank) {
      const TrainerFeed& gpu = gpus[i][rank];
      auto source = std::find_if(sources.begin(), sources.end(),
                                 [&](const BucketSource& s) { return s.device == gpu.device; });
      if (source == sources.end()) {
        return absl::InternalError(absl::StrCat(
            "group '", env_.spec.name, "': engine ", env_.adapters[i]->endpoint().url, " TP rank ",
            rank, " is on ", FeedName(gpu), " but the bucket has no source there"));
      }
      IpcBucketView view = ViewOf(*source);
      view.gpu_uuid = gpu.gpu_uuid;
      views.push_back(std::move(view));
    }
    if (streamed) {
      stream_views.push_back(std::move(views));
      continue;
    }
    WSYNC_ASSIGN_OR_RETURN(IpcBinding * binding, IpcBindingOf(*env_.adapters[i]));
    auto request = binding->BucketRequest(manifest, views, context);
    if (!request.ok()) return request.status();
    requests.push_back(std::move(*request));
  }
  if (streamed) {
    // Sent once every engine's views are built; each stream checks and describes its bucket
    // and sends nothing of one it refuses (its refusal comes through the handle).
    std::vector<std::shared_ptr<StreamResult>> results;
    for (size_t i = 0; i < streams.size(); ++i) {
      results.push_back(
          streams[i]->Send(manifest, std::move(stream_views[i]), producers, deadline));
    }
    return std::unique_ptr<BucketHandle>(std::make_unique<StreamBucket>(
        urls_, std::move(results), std::move(formation), env_.on_bucket_failed));
  }
  return std::unique_ptr<BucketHandle>(IpcBucket::Start(env_.adapters, channels, requests,
                                                        std::move(formation), deadline,
                                                        env_.on_bucket_failed, std::move(drops)));
}

absl::Status IpcTransport::FinishBuckets(absl::Time deadline) {
  std::vector<std::shared_ptr<CheckpointEngineStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  // Each engine post-processes its weights at the end: they run side by side.
  return FirstError(FanOut(streams.size(), [&](size_t i) { return streams[i]->Finish(deadline); }));
}

void IpcTransport::EndUpdate(absl::string_view why) {
  std::vector<std::shared_ptr<CheckpointEngineStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
  }
  for (auto& s : streams) s->Abort(why);
  // Cancelled before the streams go: a stream's thread may be waiting on its request.
  channels_.CancelAll(why);
  streams.clear();
}

std::map<std::string, absl::Status> IpcTransport::DroppedEngines() const {
  std::shared_ptr<EngineDrops> drops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drops = drops_;
  }
  std::map<std::string, absl::Status> out;
  if (drops == nullptr) return out;
  for (const auto& [engine, why] : drops->all()) out.emplace(urls_[engine], why);
  return out;
}

std::string IpcTransport::Describe() const {
  std::vector<std::string> parts;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < env_.adapters.size() && i < gpus_.size(); ++i) {
    std::vector<std::string> names;
    for (const TrainerFeed& gpu : gpus_[i]) names.push_back(gpu.gpu_uuid);
    parts.push_back(
        absl::StrCat(env_.adapters[i]->endpoint().url, " on ", absl::StrJoin(names, ", ")));
  }
  return absl::StrCat("ipc, ", ranks_, " engine rank(s)", parts.empty() ? "" : ": ",
                      absl::StrJoin(parts, "; "));
}

}  // namespace wsync
