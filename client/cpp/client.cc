#include "client/cpp/client.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/bucket_planner.h"
#include "common/host/host_source.h"
#include "common/host/shm_slot.h"
#include "common/secret_file.h"
#include "common/status_macros.h"
#ifdef WSYNC_HAVE_CUDA
#include "common/cuda/cuda_platform.h"
#endif

namespace wsync {

namespace {

// The allocations of wsyncd's this process maps, by kind, device and handle. A process may open a
// CUDA allocation only once (cudaIpcOpenMemHandle), so the slots that are regions of one
// allocation, and every Client of the process, share its mapping; it is unmapped when the last
// slot viewing it goes (the registry holds it weakly).
absl::StatusOr<std::shared_ptr<MappedAllocation>> MapAllocation(const v1::SlotInfo& info,
                                                                int device) {
  // Never destroyed: a Client may be destroyed during static destruction.
  static std::mutex* const mu = new std::mutex;
  static auto* const mapped = new std::map<std::string, std::weak_ptr<MappedAllocation>>;
  // A wsyncd from before regions names each slot as an allocation of its own.
  const bool own = info.allocation_bytes() == 0;
  const uint64_t bytes = own ? info.bytes() : info.allocation_bytes();
  const std::string key = absl::StrCat(static_cast<int>(info.kind()), "/", device, "/",
                                       absl::BytesToHexString(info.memory_handle()));
  std::lock_guard<std::mutex> lock(*mu);
  for (auto it = mapped->begin(); it != mapped->end();) {
    it = it->second.expired() ? mapped->erase(it) : std::next(it);
  }
  if (auto it = mapped->find(key); it != mapped->end()) {
    std::shared_ptr<MappedAllocation> allocation = it->second.lock();
    if (allocation != nullptr && allocation->bytes() >= bytes) return allocation;
    if (allocation != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("wsyncd names an allocation of ", bytes,
                                                        " bytes that this process maps as ",
                                                        allocation->bytes(), " bytes"));
    }
  }
  std::shared_ptr<MappedAllocation> allocation;
  if (info.kind() == v1::SLOT_MEMORY_HOST_SHM) {
    WSYNC_ASSIGN_OR_RETURN(allocation, ShmMapping::Open(info.memory_handle(), bytes));
  } else {
#ifdef WSYNC_HAVE_CUDA
    WSYNC_ASSIGN_OR_RETURN(allocation,
                           cuda::MapCudaAllocation(device, info.memory_handle(), bytes));
#else
    return absl::UnimplementedError(
        "the daemon offers CUDA IPC slots, but this client was built without CUDA");
#endif
  }
  (*mapped)[key] = allocation;
  return allocation;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSlot>> MapSlot(const v1::SlotInfo& info, int device) {
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<MappedAllocation> allocation, MapAllocation(info, device));
  const uint64_t offset = info.allocation_bytes() == 0 ? 0 : info.allocation_offset();
  if (info.kind() == v1::SLOT_MEMORY_HOST_SHM) {
    auto slot = ShmMappedSlot::OpenRegion(std::move(allocation), offset, info.bytes());
    if (!slot.ok()) return slot.status();
    return std::unique_ptr<MappedSlot>(std::move(*slot));
  }
#ifdef WSYNC_HAVE_CUDA
  return cuda::MapCudaSlot(device, std::move(allocation), offset, info.bytes(),
                           info.event_handle());
#else
  return absl::UnimplementedError(
      "the daemon offers CUDA IPC slots, but this client was built without CUDA");
#endif
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      trainer_(v1::Trainer::NewStub(channel_)),
      admin_(v1::Admin::NewStub(channel_)) {}

Client::~Client() {
  if (!session_id_.empty()) (void)CloseSession();
  StopKeepAlive();
}

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

ConnectOptions ConnectOptions::FromEnvironment(absl::Duration timeout) {
  ConnectOptions options;
  options.timeout = timeout;
  options.tls_ca_file = Env("WSYNC_TLS_CA");
  options.token_file = Env("WSYNC_TOKEN_FILE");
  options.tls_server_name = Env("WSYNC_TLS_SERVER_NAME");
  return options;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        absl::Duration timeout) {
  return Connect(target, ConnectOptions::FromEnvironment(timeout));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        const ConnectOptions& options) {
  // gRPC reads a target without a scheme as a host name to resolve: a socket's path would wait
  // out the whole timeout and then read as "not answering".
  const bool a_path = absl::StartsWith(target, "/") || absl::StartsWith(target, ".") ||
                      absl::EndsWith(target, ".sock");
  if (a_path && !absl::StartsWith(target, "unix:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", target, "' names no scheme: a unix socket is 'unix:", target,
                     "', a TCP address 'host:port'"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!absl::StartsWith(target, "unix:") && !options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    WSYNC_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadSecretFile(options.tls_ca_file, "TLS CA"));
    ssl.pem_root_certs += "\n";
    credentials = grpc::SslCredentials(ssl);
    if (!options.token_file.empty()) {
      WSYNC_ASSIGN_OR_RETURN(std::string token, ReadSecretFile(options.token_file, "token file"));
      credentials =
          grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token));
    }
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  } else if (!absl::StartsWith(target, "unix:") && !options.token_file.empty()) {
    return absl::InvalidArgumentError(
        "a token is only sent over TLS: give the CA file too (WSYNC_TLS_CA, --tls-ca)");
  }
  auto channel = grpc::CreateCustomChannel(target, credentials, args);
  const absl::Duration timeout = options.timeout;
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(absl::StrCat("wsyncd is not answering at ", target,
                                               " (is it running? start it with `wsyncd`, or pass "
                                               "the right --socket / address)"));
  }
  return std::unique_ptr<Client>(new Client(std::move(channel)));
}

std::unique_ptr<Client> Client::FromChannel(std::shared_ptr<grpc::Channel> channel) {
  return std::unique_ptr<Client>(new Client(std::move(channel)));
}

absl::Status Client::OpenSession(int device, const std::string& client_name) {
  if (!session_id_.empty()) return absl::FailedPreconditionError("a session is already open");
  v1::OpenSessionRequest req;
  req.set_device(device);
  req.set_client_name(client_name);
  v1::OpenSessionResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  WSYNC_RETURN_IF_ERROR(FromGrpc(trainer_->OpenSession(&ctx, req, &resp)));
  std::vector<std::unique_ptr<MappedSlot>> slots;
  for (const v1::SlotInfo& info : resp.slots()) {
    auto mapped = MapSlot(info, resp.device());
    if (!mapped.ok()) {
      grpc::ClientContext close_ctx;
      v1::CloseSessionRequest close;
      close.set_session_id(resp.session_id());
      v1::CloseSessionResponse ignored;
      (void)trainer_->CloseSession(&close_ctx, close, &ignored);
      return mapped.status();
    }
    slots.push_back(std::move(*mapped));
  }
  session_id_ = resp.session_id();
  source_tag_ = resp.source_tag();
  slots_ = std::move(slots);
  device_ = resp.device();
  checksums_ = resp.checksum() != "none";
  exporter_.reset();
  if (!resp.slots().empty() && resp.slots(0).kind() == v1::SLOT_MEMORY_HOST_SHM) {
    exporter_ = std::make_unique<HostSourceExporter>(source_tag_);
  } else {
#ifdef WSYNC_HAVE_CUDA
    exporter_ = cuda::CreateCudaSourceExporter(device_);
#endif
  }
  const absl::Duration period = absl::Seconds(std::max<uint32_t>(1, resp.lease_seconds() / 3));
  keepalive_stop_ = false;
  keepalive_ = std::thread([this, period, id = session_id_] { KeepSessionAlive(id, period); });
  return absl::OkStatus();
}

void Client::KeepSessionAlive(std::string session_id, absl::Duration period) {
  bool hold = true;
  absl::Time next = absl::Now();
  while (!keepalive_stop_) {
    if (hold) {
      grpc::ClientContext ctx;
      {
        std::lock_guard<std::mutex> lock(hold_mu_);
        if (keepalive_stop_) break;
        hold_ = &ctx;
      }
      v1::HoldSessionRequest req;
      req.set_session_id(session_id);
      auto reader = trainer_->HoldSession(&ctx, req);
      v1::HoldSessionEvent event;
      while (reader->Read(&event)) {
      }
      grpc::Status status = reader->Finish();
      {
        std::lock_guard<std::mutex> lock(hold_mu_);
        hold_ = nullptr;
      }
      if (keepalive_stop_ || status.error_code() == grpc::StatusCode::NOT_FOUND) break;
      // A daemon without holds: renew the lease by hand.
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) hold = false;
      // Otherwise the connection blinked: hold again after a pause.
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    absl::SleepFor(absl::Milliseconds(100));
    if (absl::Now() < next) continue;
    next = absl::Now() + period;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::KeepAliveRequest req;
    req.set_session_id(session_id);
    v1::KeepAliveResponse resp;
    (void)trainer_->KeepAlive(&ctx, req, &resp);
  }
}

void Client::StopKeepAlive() {
  {
    std::lock_guard<std::mutex> lock(hold_mu_);
    keepalive_stop_ = true;
    if (hold_ != nullptr) hold_->TryCancel();
  }
  if (keepalive_.joinable()) keepalive_.join();
}

absl::Status Client::CloseSession() {
  if (session_id_.empty()) return absl::FailedPreconditionError("no session is open");
  slots_.clear();
  oversize_.reset();
  v1::CloseSessionRequest req;
  req.set_session_id(session_id_);
  session_id_.clear();
  source_tag_.clear();
  v1::CloseSessionResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  // Closed first, then the hold let go: a hold cancelled first would read as a dead trainer.
  absl::Status closed = FromGrpc(trainer_->CloseSession(&ctx, req, &resp));
  StopKeepAlive();
  return closed;
}

absl::StatusOr<uint32_t> Client::ReleaseSources() {
  if (session_id_.empty()) return absl::FailedPreconditionError("no session is open");
  v1::ReleaseSourcesRequest req;
  req.set_session_id(session_id_);
  v1::ReleaseSourcesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  WSYNC_RETURN_IF_ERROR(FromGrpc(trainer_->ReleaseSources(&ctx, req, &resp)));
  return resp.closed();
}

absl::StatusOr<bool> Client::DeclareGroup(const std::string& group_json) {
  if (session_id_.empty()) return absl::FailedPreconditionError("open a session first");
  v1::DeclareGroupRequest req;
  req.set_session_id(session_id_);
  req.set_group_json(group_json);
  v1::DeclareGroupResponse resp;
  grpc::ClientContext ctx;
  // Forming asks every engine to join (and, declared anew, the old group's to leave).
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(300)));
  WSYNC_RETURN_IF_ERROR(FromGrpc(trainer_->DeclareGroup(&ctx, req, &resp)));
  return resp.formed();
}

absl::Status Client::ForgetGroup(const std::string& name) {
  if (session_id_.empty()) return absl::FailedPreconditionError("open a session first");
  v1::ForgetGroupRequest req;
  req.set_session_id(session_id_);
  req.set_name(name);
  v1::ForgetGroupResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  return FromGrpc(trainer_->ForgetGroup(&ctx, req, &resp));
}

absl::StatusOr<std::unique_ptr<HostSourceArena>> Client::NewSourceArena(uint64_t bytes) const {
  if (session_id_.empty()) {
    return absl::FailedPreconditionError("open a session first: its sources carry its tag");
  }
  return HostSourceArena::Create(source_tag_, bytes);
}

uint64_t Client::slot_bytes() const { return slots_.empty() ? 0 : slots_[0]->bytes(); }

absl::StatusOr<std::unique_ptr<PushStream>> Client::BeginPush(const std::string& group,
                                                              const std::string& version,
                                                              PushOptions options) {
  if (session_id_.empty()) return absl::FailedPreconditionError("open a session before pushing");
  std::vector<MappedSlot*> slots;
  for (auto& s : slots_) slots.push_back(s.get());
  options.checksums = checksums_;
  options.exporter = options.pull || options.pull_as_group_prefers ? exporter_.get() : nullptr;
  return PushStream::Begin(
      trainer_.get(), session_id_, group, version, std::move(slots),
      [this](uint64_t bytes) { return OversizeSlot(bytes); }, std::move(options));
}

absl::StatusOr<std::pair<uint32_t, MappedSlot*>> Client::OversizeSlot(uint64_t bytes) {
  if (oversize_ && oversize_->bytes() >= bytes) {
    return std::make_pair(oversize_index_, oversize_.get());
  }
  // Unmapped first: a larger one replaces it, and the daemon frees the old memory.
  oversize_.reset();
  v1::ReserveOversizeSlotRequest req;
  req.set_session_id(session_id_);
  req.set_bytes(bytes);
  v1::SlotInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  WSYNC_RETURN_IF_ERROR(FromGrpc(trainer_->ReserveOversizeSlot(&ctx, req, &info)));
  WSYNC_ASSIGN_OR_RETURN(oversize_, MapSlot(info, device_));
  oversize_index_ = info.index();
  return std::make_pair(oversize_index_, oversize_.get());
}

absl::StatusOr<PushResult> Client::Push(const std::string& group, const std::string& version,
                                        const std::vector<TensorRef>& tensors,
                                        const std::function<void(const PushProgress&)>& progress) {
  if (session_id_.empty()) return absl::FailedPreconditionError("open a session before pushing");
  // Planned whole first, so an oversized or malformed tensor is refused before anything is sent.
  // The group's bucket rules arrive only with UpdateStarted, but they close buckets earlier and
  // never refuse a tensor, so this plan refuses exactly what the one sent would.
  std::vector<TensorDesc> descs;
  for (const TensorRef& t : tensors) descs.push_back(TensorDesc{t.name, t.dtype, t.shape, t.bytes});
  WSYNC_ASSIGN_OR_RETURN(std::vector<PlannedBucket> plan,
                         PlanBuckets(descs, slot_bytes(), /*oversize_alone=*/true));
  if (plan.empty()) return absl::InvalidArgumentError("nothing to push: no tensors");
  PushOptions options;
  options.progress = progress;
  options.buckets_total = plan.size();
  // The whole list is known, so the bucket holding its last tensor is sent marked last.
  options.tensors_total = tensors.size();
  WSYNC_ASSIGN_OR_RETURN(auto push, BeginPush(group, version, std::move(options)));
  // The buckets sent are the stream's, planned under the rules; count them the same way.
  if (push->bucket_rules() != BucketRules{}) {
    auto ruled = PlanBuckets(descs, slot_bytes(), /*oversize_alone=*/true, push->bucket_rules());
    if (!ruled.ok()) {
      push->Abort(std::string(ruled.status().message()));
      return ruled.status();
    }
    push->SetBucketsTotal(ruled->size());
  }
  WSYNC_RETURN_IF_ERROR(push->Add(tensors));
  return push->Commit();
}

}  // namespace wsync
