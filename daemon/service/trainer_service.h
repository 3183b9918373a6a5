#ifndef WSYNC_DAEMON_SERVICE_TRAINER_SERVICE_H_
#define WSYNC_DAEMON_SERVICE_TRAINER_SERVICE_H_

#include "daemon/core/daemon_core.h"
#include "daemon/service/authorizer.h"
#include "daemon/service/session_owners.h"
#include "daemon/service/stream_gate.h"
#include "daemon/wire/manifest_proto.h"
#include "wsync/v1/trainer.grpc.pb.h"

namespace wsync {

class TrainerService final : public v1::Trainer::Service {
 public:
  // `streams` admits the update streams and session holds (each holds a server thread).
  TrainerService(DaemonCore* core, const Authorizer* auth, StreamGate* streams)
      : core_(core), auth_(auth), streams_(streams) {}

  grpc::Status OpenSession(grpc::ServerContext* context, const v1::OpenSessionRequest* request,
                           v1::OpenSessionResponse* response) override;
  grpc::Status ReserveOversizeSlot(grpc::ServerContext* context,
                                   const v1::ReserveOversizeSlotRequest* request,
                                   v1::SlotInfo* response) override;
  grpc::Status KeepAlive(grpc::ServerContext* context, const v1::KeepAliveRequest* request,
                         v1::KeepAliveResponse* response) override;
  grpc::Status HoldSession(grpc::ServerContext* context, const v1::HoldSessionRequest* request,
                           grpc::ServerWriter<v1::HoldSessionEvent>* writer) override;
  grpc::Status CloseSession(grpc::ServerContext* context, const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse* response) override;
  grpc::Status ReleaseSources(grpc::ServerContext* context,
                              const v1::ReleaseSourcesRequest* request,
                              v1::ReleaseSourcesResponse* response) override;
  grpc::Status Update(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::UpdateEvent, v1::UpdateRequest>* stream) override;
  grpc::Status DeclareGroup(grpc::ServerContext* context, const v1::DeclareGroupRequest* request,
                            v1::DeclareGroupResponse* response) override;
  grpc::Status ForgetGroup(grpc::ServerContext* context, const v1::ForgetGroupRequest* request,
                           v1::ForgetGroupResponse* response) override;

 private:
  // Validates one wire bucket (resolving a pull bucket's sources) and hands it to the update.
  absl::Status SubmitBucket(const std::string& session_id, const v1::Bucket& bucket,
                            UpdateMember& run);
  // OK when the caller is a trainer (or admin) on the connection that opened `session_id`, or
  // an admin when `admin_may`.
  grpc::Status AuthorizeSession(const grpc::ServerContext& context, const char* call,
                                const std::string& session_id, bool admin_may,
                                Caller* caller = nullptr) const;
  DaemonCore* core_;
  const Authorizer* auth_;
  StreamGate* streams_;
  SessionOwners owners_;
  HeldSessions held_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_TRAINER_SERVICE_H_
