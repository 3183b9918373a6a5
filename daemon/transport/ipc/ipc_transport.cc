#include "daemon/transport/ipc/ipc_transport.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace wsync {

IpcTransport::IpcTransport(TransportEnv env) : env_(std::move(env)) {
  for (EngineAdapter* a : env_.adapters) {
    urls_.push_back(a->endpoint().url);
    ranks_ += a->endpoint().ranks;
  }
}

IpcTransport::~IpcTransport() { channels_.CancelAll("group torn down"); }

absl::Status IpcTransport::Form() {
  std::lock_guard<std::mutex> lock(mu_);
  formation_.reset();
  gpus_.clear();
  std::vector<std::vector<std::string>> gpus;
  for (size_t i = 0; i < env_.adapters.size(); ++i) {
    EngineAdapter* a = env_.adapters[i];
    const EngineSpec& spec = env_.spec.engines[i];
    if (!a->Capabilities().Supports(DataPath::kCudaIpc)) {
      return absl::UnimplementedError(absl::StrCat("group '", env_.spec.name, "': engine ",
                                                   spec.url, " cannot load buckets over IPC"));
    }
    std::vector<std::string>& engine_gpus = gpus.emplace_back();
    for (size_t rank = 0; rank < spec.gpus.size(); ++rank) {
      absl::StatusOr<int> device = FindDeviceByUuid(*env_.platform, spec.gpus[rank]);
      if (!device.ok()) {
        return absl::Status(device.status().code(),
                            absl::StrCat("group '", env_.spec.name, "': engine ", spec.url,
                                         " TP rank ", rank, ": ", device.status().message()));
      }
      if (*device != env_.spec.device) {
        return absl::UnimplementedError(absl::StrCat(
            "group '", env_.spec.name, "': engine ", spec.url, " TP rank ", rank, " is on GPU ",
            spec.gpus[rank], " (wsyncd device ", *device, "), not the group's device ",
            env_.spec.device,
            "; an IPC group whose ranks span GPUs needs a trainer rank feeding each GPU, which "
            "is not built yet"));
      }
      engine_gpus.push_back(NormalizeGpuUuid(spec.gpus[rank]));
    }
  }
  gpus_ = std::move(gpus);
  formation_ = std::make_shared<IpcFormation>();
  return absl::OkStatus();
}

void IpcTransport::Disband() { Release("the group is disbanded"); }

void IpcTransport::Release(absl::string_view why) {
  channels_.CancelAll(why);
  std::lock_guard<std::mutex> lock(mu_);
  if (formation_) formation_->failed = true;
  formation_.reset();
}

std::vector<absl::Status> IpcTransport::LeaveStale(const std::string&) {
  return std::vector<absl::Status>(env_.adapters.size(), absl::OkStatus());
}

absl::Status IpcTransport::CheckFormed() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!formation_) return absl::FailedPreconditionError("the group is not formed");
  if (formation_->failed) {
    return absl::FailedPreconditionError("a bucket of the last update failed");
  }
  return absl::OkStatus();
}

absl::Status IpcTransport::BeginUpdate(const UpdateInfo&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!formation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", env_.spec.name, "' is not formed; form it first"));
  }
  channels_.Open(urls_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BucketHandle>> IpcTransport::StartBucket(
    const std::vector<BucketSource>& sources, const BucketManifest& manifest,
    const BucketContext& context, absl::Time deadline) {
  if (sources.size() != 1 || sources.front().slot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("group '", env_.spec.name,
                                                   "': an IPC bucket comes from one slot, not ",
                                                   sources.size(), " source(s)"));
  }
  const BucketSource& source = sources.front();
  if (source.base != nullptr &&
      (source.base_memory == nullptr || source.base_memory->memory_handle().empty())) {
    return absl::InternalError(absl::StrCat(
        "group '", env_.spec.name, "': a bucket read in place without its allocation's handle"));
  }
  std::shared_ptr<IpcFormation> formation;
  std::vector<std::vector<std::string>> gpus;
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
  if (channels.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", env_.spec.name, "': no update is open on the transport"));
  }
  SlotMemory& slot = *source.slot;
  // The memory the engines read: the slot, or (zero copy) the trainer's allocation the bucket
  // lies in as it is laid out. Either way the slot's event orders the trainer's writes (the
  // client records it when the bucket is ready), and the slot is held until the answers.
  IpcBucketView memory{"", slot.kind(), slot.memory_handle(), slot.bytes(), 0, slot.event_handle()};
  if (source.base != nullptr) {
    const SourceMemory& trainer = *source.base_memory;
    memory.memory_kind = trainer.kind();
    memory.memory_handle = trainer.memory_handle();
    memory.allocation_bytes = trainer.bytes();
    memory.offset = static_cast<uint64_t>(static_cast<const char*>(source.base) -
                                          static_cast<const char*>(trainer.data()));
  }
  // Built before anything is written: a bucket an adapter cannot describe reaches no engine.
  std::vector<EngineRequest> requests;
  for (size_t i = 0; i < env_.adapters.size(); ++i) {
    std::vector<IpcBucketView> views;
    for (const std::string& gpu : gpus[i]) {
      IpcBucketView view = memory;
      view.gpu_uuid = gpu;
      views.push_back(std::move(view));
    }
    auto request = env_.adapters[i]->IpcBucketRequest(manifest, views, context);
    if (!request.ok()) return request.status();
    requests.push_back(std::move(*request));
  }
  return std::unique_ptr<BucketHandle>(IpcBucket::Start(
      env_.adapters, channels, requests, std::move(formation), deadline, env_.on_bucket_failed));
}

void IpcTransport::EndUpdate(absl::string_view why) { channels_.CancelAll(why); }

std::string IpcTransport::Describe() const {
  std::vector<std::string> parts;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < env_.adapters.size() && i < gpus_.size(); ++i) {
    parts.push_back(
        absl::StrCat(env_.adapters[i]->endpoint().url, " on ", absl::StrJoin(gpus_[i], ", ")));
  }
  return absl::StrCat("ipc, device ", env_.spec.device, ", ", ranks_, " engine rank(s)",
                      parts.empty() ? "" : ": ", absl::StrJoin(parts, "; "));
}

}  // namespace wsync
