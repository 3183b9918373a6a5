#include "daemon/service/trainer_service.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/service/config_json.h"
#include "daemon/service/group_spec_json.h"
#include "daemon/service/status_mapping.h"
#include "daemon/service/update_stream_events.h"

namespace wsync {
namespace {

// After an update fails, the trainer may still be writing buckets. Reading them until it
// half-closes lets it see the result on every transport (gRPC's in-process transport completes a
// client write only when the server reads it); a trainer that never half-closes is cut off.
void DrainClient(grpc::ServerContext* context,
                 grpc::ServerReaderWriter<v1::UpdateEvent, v1::UpdateRequest>* stream) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; })) context->TryCancel();
  });
  v1::UpdateRequest ignored;
  while (stream->Read(&ignored)) {
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

}  // namespace

namespace {

void SlotToProto(uint32_t index, SlotMemory& slot, v1::SlotInfo* info) {
  info->set_index(index);
  info->set_bytes(slot.bytes());
  info->set_kind(slot.kind() == MemoryKind::kHostShm ? v1::SLOT_MEMORY_HOST_SHM
                                                     : v1::SLOT_MEMORY_CUDA_IPC);
  info->set_memory_handle(slot.memory_handle());
  info->set_event_handle(slot.event_handle());
  info->set_allocation_offset(slot.allocation_offset());
  info->set_allocation_bytes(slot.allocation_bytes());
}

}  // namespace

grpc::Status TrainerService::AuthorizeSession(const grpc::ServerContext& context, const char* call,
                                              const std::string& session_id, bool admin_may,
                                              Caller* out) const {
  Caller caller;
  if (grpc::Status s = auth_->Require(context, Role::kTrainer, call, &caller); !s.ok()) return s;
  grpc::Status checked = ToGrpcStatus(owners_.Check(session_id, caller, admin_may));
  if (out != nullptr) *out = std::move(caller);
  return checked;
}

grpc::Status TrainerService::OpenSession(grpc::ServerContext* context,
                                         const v1::OpenSessionRequest* req,
                                         v1::OpenSessionResponse* resp) {
  Caller caller;
  if (grpc::Status s = auth_->Require(*context, Role::kTrainer, "OpenSession", &caller); !s.ok()) {
    return s;
  }
  auto session = core_->OpenSession(req->device(), req->client_name());
  if (!session.ok()) return ToGrpcStatus(session.status());
  // Sessions the core ended on its own (leases) are forgotten here as new ones open.
  owners_.Record(session->id, caller, [&] { return core_->SessionIds(); });
  resp->set_session_id(session->id);
  resp->set_source_tag(session->source_tag);
  resp->set_device(session->device);
  resp->set_lease_seconds(static_cast<uint32_t>(absl::ToInt64Seconds(session->lease)));
  resp->set_checksum(core_->options().checksum == "none" ? "none" : kChecksumName);
  for (size_t i = 0; i < session->slots.size(); ++i) {
    SlotToProto(static_cast<uint32_t>(i), *session->slots[i], resp->add_slots());
  }
  return grpc::Status::OK;
}

grpc::Status TrainerService::ReserveOversizeSlot(grpc::ServerContext* context,
                                                 const v1::ReserveOversizeSlotRequest* req,
                                                 v1::SlotInfo* resp) {
  if (grpc::Status s = AuthorizeSession(*context, "ReserveOversizeSlot", req->session_id(), false);
      !s.ok()) {
    return s;
  }
  auto slot = core_->ReserveOversizeSlot(req->session_id(), req->bytes());
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  SlotToProto(slot->first, *slot->second, resp);
  return grpc::Status::OK;
}

grpc::Status TrainerService::KeepAlive(grpc::ServerContext* context,
                                       const v1::KeepAliveRequest* req, v1::KeepAliveResponse*) {
  if (grpc::Status s = AuthorizeSession(*context, "KeepAlive", req->session_id(), false); !s.ok()) {
    return s;
  }
  return ToGrpcStatus(core_->KeepAlive(req->session_id()));
}

grpc::Status TrainerService::HoldSession(grpc::ServerContext* context,
                                         const v1::HoldSessionRequest* req,
                                         grpc::ServerWriter<v1::HoldSessionEvent>*) {
  const std::string& id = req->session_id();
  Caller caller;
  if (grpc::Status s = AuthorizeSession(*context, "HoldSession", id, false, &caller); !s.ok()) {
    return s;
  }
  // A hold waits as long as the session lives: it keeps its place with no deadline.
  auto ticket = streams_->Admit(caller, "HoldSession", context->c_call(), StreamRule{});
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  if (absl::Status s = core_->KeepAlive(id); !s.ok()) return ToGrpcStatus(s);
  // One hold per session: each holds a server thread for the session's life.
  if (!held_.Claim(id)) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        absl::StrCat("session ", id, " is already held by another call"));
  }
  absl::Cleanup release = [&] { held_.Release(id); };
  // gRPC cancels the call when the trainer's connection goes: that is how a dead trainer is seen.
  while (!context->IsCancelled()) {
    // Closed by CloseSession (or its lease expired): the hold ends with it.
    if (!core_->KeepAlive(id).ok()) return grpc::Status::OK;
    absl::SleepFor(absl::Milliseconds(100));
  }
  // The session may outlive this call a little (an update still running): its owner record
  // stays until the core has closed it.
  core_->CloseDisconnectedSession(id);
  return grpc::Status(grpc::StatusCode::CANCELLED, "the trainer went away");
}

grpc::Status TrainerService::CloseSession(grpc::ServerContext* context,
                                          const v1::CloseSessionRequest* req,
                                          v1::CloseSessionResponse*) {
  if (grpc::Status s = AuthorizeSession(*context, "CloseSession", req->session_id(), true);
      !s.ok()) {
    return s;
  }
  absl::Status closed = core_->CloseSession(req->session_id());
  if (closed.ok()) owners_.Forget(req->session_id());
  return ToGrpcStatus(closed);
}

grpc::Status TrainerService::ReleaseSources(grpc::ServerContext* context,
                                            const v1::ReleaseSourcesRequest* req,
                                            v1::ReleaseSourcesResponse* resp) {
  if (grpc::Status s = AuthorizeSession(*context, "ReleaseSources", req->session_id(), false);
      !s.ok()) {
    return s;
  }
  auto closed = core_->ReleaseSources(req->session_id());
  if (!closed.ok()) return ToGrpcStatus(closed.status());
  resp->set_closed(static_cast<uint32_t>(*closed));
  return grpc::Status::OK;
}

grpc::Status TrainerService::DeclareGroup(grpc::ServerContext* context,
                                          const v1::DeclareGroupRequest* req,
                                          v1::DeclareGroupResponse* resp) {
  if (grpc::Status s = AuthorizeSession(*context, "DeclareGroup", req->session_id(), false);
      !s.ok()) {
    return s;
  }
  // The config file's form of a group, and its errors' paths ("group_json.engines[0].url").
  auto json = config_json::Parse(req->group_json(), "group_json");
  if (!json.ok()) return ToGrpcStatus(json.status());
  auto spec = GroupSpecFromJson(*json, "group_json");
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  auto declared = core_->DeclareSessionGroup(req->session_id(), *spec);
  if (!declared.ok()) return ToGrpcStatus(declared.status());
  resp->set_name(declared->first.spec.name);
  resp->set_formed(declared->second);
  resp->set_world_size(declared->first.world_size);
  return grpc::Status::OK;
}

grpc::Status TrainerService::ForgetGroup(grpc::ServerContext* context,
                                         const v1::ForgetGroupRequest* req,
                                         v1::ForgetGroupResponse*) {
  if (grpc::Status s = AuthorizeSession(*context, "ForgetGroup", req->session_id(), false);
      !s.ok()) {
    return s;
  }
  return ToGrpcStatus(core_->ForgetSessionGroup(req->session_id(), req->name()));
}

absl::Status TrainerService::SubmitBucket(const std::string& session_id, const v1::Bucket& bucket,
                                          UpdateMember& run) {
  const auto refused = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("bucket ", bucket.sequence(), " refused: ", s.message()));
  };
  auto manifest = ManifestFromProto(bucket);
  if (!manifest.ok()) return refused(manifest.status());
  // A client that predates checksum_algorithm sends the full CRC-32.
  std::optional<ChecksumKind> kind = bucket.checksum_algorithm().empty()
                                         ? ChecksumKind::kCrc32
                                         : ParseChecksumKind(bucket.checksum_algorithm());
  if (!kind.has_value() || *kind == ChecksumKind::kNone) {
    return refused(absl::InvalidArgumentError(
        absl::StrCat("checksum_algorithm \"", SanitizePeerText(bucket.checksum_algorithm(), 64),
                     "\" is none of \"crc32\", \"crc32-sampled\"")));
  }
  PulledSources pulled;
  if (bucket.sources_size() > 0) {
    std::vector<AllocationAnnounce> announced;
    for (const auto& a : bucket.allocations()) {
      announced.push_back(AllocationAnnounce{a.id(), a.handle(), a.bytes()});
    }
    std::vector<TensorSourceRef> sources;
    for (const auto& src : bucket.sources()) {
      sources.push_back(TensorSourceRef{src.allocation(), src.offset()});
    }
    auto resolved = core_->ResolveSources(session_id, announced, sources, *manifest);
    if (!resolved.ok()) return refused(resolved.status());
    pulled = std::move(*resolved);
  }
  if (bucket.planned_buckets() != 0) run.NotePlan(bucket.planned_buckets(), bucket.planned_bytes());
  return run.SubmitBucket(bucket.slot(), std::move(*manifest), bucket.checksum(), bucket.sequence(),
                          std::move(pulled), bucket.last(), *kind);
}

grpc::Status TrainerService::Update(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::UpdateEvent, v1::UpdateRequest>* stream) {
  // Who may push at all is known before a byte is read; whose session, after begin.
  Caller caller;
  if (grpc::Status s = auth_->Require(*context, Role::kTrainer, "Update", &caller); !s.ok()) {
    return s;
  }
  // The stream holds a server thread: its begin is due within the gate's idle timeout (a
  // cancelled stream's read fails, and the caller has the gate's DEADLINE_EXCEEDED).
  auto ticket = streams_->Admit(caller, "Update", context->c_call(),
                                StreamRule{StreamProgress::kFirstMessage, "begin"});
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  v1::UpdateRequest request;
  if (!stream->Read(&request)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "stream closed before begin");
  }
  ticket->Progress();
  if (!request.has_begin()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of an update must be begin");
  }
  UpdateStreamEvents events(context, stream, core_->options().bucket_timeout);
  const v1::BeginUpdate begin = request.begin();  // a copy: `request` is reused below
  if (grpc::Status s = AuthorizeSession(*context, "Update", begin.session_id(), false); !s.ok()) {
    return s;
  }
  auto run = core_->BeginUpdate(
      begin.session_id(), begin.group(), begin.version(), &events,
      begin.has_tp_rank() ? static_cast<int>(std::min<uint32_t>(begin.tp_rank(), 1u << 20)) : -1);
  if (!run.ok()) return ToGrpcStatus(run.status());
  {
    v1::UpdateEvent started;
    started.mutable_started()->set_update_id((*run)->id());
    started.mutable_started()->set_world_size((*run)->world_size());
    const BucketRules& rules = (*run)->bucket_rules();
    started.mutable_started()->mutable_bucket_rules()->set_one_dtype(rules.one_dtype);
    started.mutable_started()->mutable_bucket_rules()->set_close_after_bytes(
        rules.close_after_bytes);
    started.mutable_started()->set_pull_preferred((*run)->pull_preferred());
    started.mutable_started()->set_checksum(std::string(ChecksumKindName((*run)->checksum())));
    started.mutable_started()->set_pull_one_allocation_per_bucket(
        (*run)->sources_mapped_per_update());
    events.Write(started);
  }
  auto finish = [&](const UpdateOutcome& outcome) {
    events.WriteResult(outcome);
    if (!outcome.status.ok()) DrainClient(context, stream);
    return ToGrpcStatus(outcome.status);
  };
  while (true) {
    if (!stream->Read(&request)) {
      // Either the trainer half-closed after hearing that the update failed, or it went away
      // (crash, cancel) before committing: nothing more will come.
      if (absl::Status failed = (*run)->failure(); !failed.ok()) {
        UpdateOutcome outcome = (*run)->Abort(failed);
        events.WriteResult(outcome);
        return ToGrpcStatus(outcome.status);
      }
      UpdateOutcome outcome = (*run)->Abort(
          absl::CancelledError("the trainer disconnected before commit; update aborted"));
      return ToGrpcStatus(outcome.status);
    }
    switch (request.kind_case()) {
      case v1::UpdateRequest::kBucket: {
        absl::Status s = SubmitBucket(begin.session_id(), request.bucket(), **run);
        if (!s.ok()) return finish((*run)->Abort(s));
        break;
      }
      case v1::UpdateRequest::kCommit: {
        // The client half-closes after commit; anything else that arrives is a protocol error and
        // the update is aborted before the engines record the version.
        v1::UpdateRequest extra;
        if (stream->Read(&extra)) {
          return finish((*run)->Abort(absl::FailedPreconditionError(
              absl::StrCat("a ", extra.has_bucket() ? "bucket" : "message",
                           " arrived after commit; the update is aborted"))));
        }
        return finish((*run)->Commit());
      }
      case v1::UpdateRequest::kAbort:
        return finish((*run)->Abort(absl::AbortedError(
            absl::StrCat("aborted by the trainer: ", SanitizePeerText(request.abort().reason())))));
      case v1::UpdateRequest::kBegin:
        return finish(
            (*run)->Abort(absl::FailedPreconditionError("begin sent twice in one update stream")));
      default:
        return finish((*run)->Abort(absl::InvalidArgumentError("empty update message")));
    }
  }
}

}  // namespace wsync
