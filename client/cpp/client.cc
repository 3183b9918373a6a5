#include "client/cpp/client.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/bucket_planner.h"
#include "common/host/shm_slot.h"
#include "common/status_macros.h"
#ifdef WSYNC_HAVE_CUDA
#include "common/cuda/cuda_platform.h"
#endif

namespace wsync {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSlot>> MapSlot(const v1::SlotInfo& info, int device) {
  if (info.kind() == v1::SLOT_MEMORY_HOST_SHM) {
    auto slot = ShmMappedSlot::Open(info.memory_handle(), info.bytes());
    if (!slot.ok()) return slot.status();
    return std::unique_ptr<MappedSlot>(std::move(*slot));
  }
#ifdef WSYNC_HAVE_CUDA
  return cuda::MapCudaSlot(device, info.memory_handle(), info.event_handle(), info.bytes());
#else
  return absl::UnimplementedError(
      "the daemon offers CUDA IPC slots, but this client was built without CUDA");
#endif
}

UpdateStream::UpdateStream(v1::Trainer::Stub* stub, absl::Duration timeout) {
  context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  stream_ = stub->Update(&context_);
}

UpdateStream::~UpdateStream() {
  if (!finished_) {
    context_.TryCancel();
    (void)Finish();
  }
}

absl::StatusOr<v1::UpdateStarted> UpdateStream::Begin(const std::string& session_id,
                                                      const std::string& group,
                                                      const std::string& version) {
  v1::UpdateRequest req;
  req.mutable_begin()->set_session_id(session_id);
  req.mutable_begin()->set_group(group);
  req.mutable_begin()->set_version(version);
  v1::UpdateEvent event;
  if (!stream_->Write(req) || !Next(&event)) {
    absl::Status s = Finish();
    return s.ok() ? absl::InternalError("update stream ended before it started") : s;
  }
  if (!event.has_started()) return absl::InternalError("first event of an update is not Started");
  return event.started();
}

bool UpdateStream::Send(const v1::UpdateRequest& request) { return stream_->Write(request); }

bool UpdateStream::SendBucket(const v1::Bucket& bucket) {
  v1::UpdateRequest req;
  *req.mutable_bucket() = bucket;
  return stream_->Write(req);
}

bool UpdateStream::Commit() {
  v1::UpdateRequest req;
  req.mutable_commit();
  bool ok = stream_->Write(req);
  return stream_->WritesDone() && ok;
}

bool UpdateStream::Abort(const std::string& reason) {
  v1::UpdateRequest req;
  req.mutable_abort()->set_reason(reason);
  bool ok = stream_->Write(req);
  return stream_->WritesDone() && ok;
}

bool UpdateStream::Next(v1::UpdateEvent* event) { return stream_->Read(event); }

bool UpdateStream::CloseWrites() { return stream_->WritesDone(); }

void UpdateStream::Cancel() { context_.TryCancel(); }

absl::Status UpdateStream::Finish() {
  if (!finished_) {
    finished_ = true;
    final_ = FromGrpc(stream_->Finish());
  }
  return final_;
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      trainer_(v1::Trainer::NewStub(channel_)),
      admin_(v1::Admin::NewStub(channel_)) {}

Client::~Client() {
  if (!session_id_.empty()) (void)CloseSession();
  StopKeepAlive();
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        absl::Duration timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
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
  slots_ = std::move(slots);
  const absl::Duration period = absl::Seconds(std::max<uint32_t>(1, resp.lease_seconds() / 3));
  keepalive_stop_ = false;
  keepalive_ = std::thread([this, period, id = session_id_] {
    absl::Time next = absl::Now() + period;
    while (!keepalive_stop_) {
      absl::SleepFor(absl::Milliseconds(100));
      if (absl::Now() < next) continue;
      next = absl::Now() + period;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      v1::KeepAliveRequest req;
      req.set_session_id(id);
      v1::KeepAliveResponse resp;
      (void)trainer_->KeepAlive(&ctx, req, &resp);
    }
  });
  return absl::OkStatus();
}

void Client::StopKeepAlive() {
  keepalive_stop_ = true;
  if (keepalive_.joinable()) keepalive_.join();
}

absl::Status Client::CloseSession() {
  if (session_id_.empty()) return absl::FailedPreconditionError("no session is open");
  StopKeepAlive();
  slots_.clear();
  v1::CloseSessionRequest req;
  req.set_session_id(session_id_);
  session_id_.clear();
  v1::CloseSessionResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return FromGrpc(trainer_->CloseSession(&ctx, req, &resp));
}

uint64_t Client::slot_bytes() const { return slots_.empty() ? 0 : slots_[0]->bytes(); }

absl::StatusOr<PushResult> Client::Push(const std::string& group, const std::string& version,
                                        const std::vector<TensorRef>& tensors,
                                        const std::function<void(const PushProgress&)>& progress) {
  if (session_id_.empty()) return absl::FailedPreconditionError("open a session before pushing");
  std::vector<TensorDesc> descs;
  descs.reserve(tensors.size());
  PushProgress prog;
  for (const TensorRef& t : tensors) {
    descs.push_back(TensorDesc{t.name, t.dtype, t.shape, t.bytes});
    prog.bytes_total += t.bytes;
  }
  WSYNC_ASSIGN_OR_RETURN(std::vector<PlannedBucket> plan, PlanBuckets(descs, slot_bytes()));
  if (plan.empty()) return absl::InvalidArgumentError("nothing to push: no tensors");
  prog.buckets_total = plan.size();

  UpdateStream stream(trainer_.get(), absl::Hours(24));
  WSYNC_RETURN_IF_ERROR(stream.Begin(session_id_, group, version).status());
  const absl::Time t0 = absl::Now();

  // The reader thread turns SlotFree events into free slots for the filler below.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<uint32_t> free_slots;
  for (uint32_t i = 0; i < slots_.size(); ++i) free_slots.push_back(i);
  bool ended = false;
  v1::UpdateResult result;
  bool have_result = false;
  std::thread reader([&] {
    v1::UpdateEvent event;
    while (stream.Next(&event)) {
      std::lock_guard<std::mutex> lock(mu);
      if (event.has_slot_free()) {
        free_slots.push_back(event.slot_free().slot());
      } else if (event.has_bucket_done()) {
        ++prog.buckets_done;
        prog.bytes_done += event.bucket_done().bytes();
        prog.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
        if (progress) progress(prog);
      } else if (event.has_result()) {
        // The result is the last event; the filler must stop and half-close so the daemon can
        // end the call.
        result = event.result();
        have_result = true;
        ended = true;
      }
      cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu);
    ended = true;
    cv.notify_all();
  });

  absl::Status send_status;
  uint64_t sequence = 0;
  for (const PlannedBucket& bucket : plan) {
    uint32_t slot_index;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_slots.empty() || ended; });
      if (ended) break;
      slot_index = free_slots.front();
      free_slots.pop_front();
    }
    MappedSlot& slot = *slots_[slot_index];
    v1::Bucket wire;
    wire.set_slot(slot_index);
    wire.set_sequence(sequence++);
    std::vector<SlotCopy> copies;
    for (const PlannedTensor& pt : bucket.tensors) {
      const TensorRef& t = tensors[pt.index];
      copies.push_back(SlotCopy{pt.offset, t.data, t.bytes});
      v1::TensorSpec* spec = wire.add_tensors();
      spec->set_name(t.name);
      spec->set_dtype(std::string(DTypeName(t.dtype)));
      for (int64_t d : t.shape) spec->add_shape(d);
      spec->set_offset(pt.offset);
      spec->set_length(t.bytes);
    }
    send_status = slot.CopyBatch(copies);
    if (!send_status.ok()) break;
    auto crc = slot.Checksum(bucket.bytes);
    if (!crc.ok()) {
      send_status = crc.status();
      break;
    }
    wire.set_checksum(*crc);
    send_status = slot.MarkWritten();
    if (!send_status.ok()) break;
    if (!stream.SendBucket(wire)) break;  // the daemon ended the stream; its status says why
  }
  if (send_status.ok()) {
    std::unique_lock<std::mutex> lock(mu);
    const bool daemon_ended = ended;
    lock.unlock();
    if (daemon_ended) {
      stream.CloseWrites();
    } else {
      stream.Commit();
    }
  } else {
    stream.Abort(std::string(send_status.message()));
  }
  reader.join();
  absl::Status final_status = stream.Finish();
  if (!send_status.ok()) return send_status;
  if (!final_status.ok()) return final_status;
  if (!have_result) return absl::InternalError("update ended without a result");
  PushResult out;
  out.update_id = result.update_id();
  out.buckets = result.buckets();
  out.bytes = result.bytes();
  out.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  for (const auto& e : result.engines()) {
    out.engines.push_back(EngineResultView{
        e.engine(), absl::Status(static_cast<absl::StatusCode>(e.code()), e.message())});
  }
  return out;
}

}  // namespace wsync
