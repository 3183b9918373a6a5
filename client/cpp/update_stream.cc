#include "client/cpp/update_stream.h"

#include "absl/time/clock.h"

namespace wsync {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
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
                                                      const std::string& version, int tp_rank) {
  v1::UpdateRequest req;
  req.mutable_begin()->set_session_id(session_id);
  req.mutable_begin()->set_group(group);
  req.mutable_begin()->set_version(version);
  if (tp_rank >= 0) req.mutable_begin()->set_tp_rank(static_cast<uint32_t>(tp_rank));
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

}  // namespace wsync
