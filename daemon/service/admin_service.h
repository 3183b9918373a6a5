#ifndef WSYNC_DAEMON_SERVICE_ADMIN_SERVICE_H_
#define WSYNC_DAEMON_SERVICE_ADMIN_SERVICE_H_

#include <mutex>
#include <string>

#include "daemon/core/daemon_core.h"
#include "daemon/relay/relay_feeder.h"
#include "daemon/relay/relay_subscribers.h"
#include "daemon/service/authorizer.h"
#include "wsync/v1/admin.grpc.pb.h"

namespace wsync {

class AdminService final : public v1::Admin::Service {
 public:
  // Reading state needs a trainer's role; changing it (groups, drain) an admin's.
  AdminService(DaemonCore* core, const Authorizer* auth, std::string listen_description,
               const RelaySubscribers* subscribers, const RelayFeeders* feeders)
      : core_(core),
        auth_(auth),
        listen_(std::move(listen_description)),
        subscribers_(subscribers),
        feeders_(feeders) {}

  grpc::Status CreateGroup(grpc::ServerContext*, const v1::CreateGroupRequest*,
                           v1::GroupInfo*) override;
  grpc::Status ListGroups(grpc::ServerContext*, const v1::ListGroupsRequest*,
                          v1::ListGroupsResponse*) override;
  grpc::Status GetGroup(grpc::ServerContext*, const v1::GetGroupRequest*, v1::GroupInfo*) override;
  grpc::Status DestroyGroup(grpc::ServerContext*, const v1::DestroyGroupRequest*,
                            v1::DestroyGroupResponse*) override;
  grpc::Status ListEngines(grpc::ServerContext*, const v1::ListEnginesRequest*,
                           v1::ListEnginesResponse*) override;
  grpc::Status ReleaseBuffers(grpc::ServerContext*, const v1::ReleaseBuffersRequest*,
                              v1::ReleaseBuffersResponse*) override;
  grpc::Status ListBuffers(grpc::ServerContext*, const v1::ListBuffersRequest*,
                           v1::ListBuffersResponse*) override;
  grpc::Status ListUpdates(grpc::ServerContext*, const v1::ListUpdatesRequest*,
                           v1::ListUpdatesResponse*) override;
  grpc::Status ListProgress(grpc::ServerContext*, const v1::ListProgressRequest*,
                            v1::ListProgressResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::DaemonStatus*) override;
  grpc::Status Drain(grpc::ServerContext*, const v1::DrainRequest*, v1::DrainResponse*) override;
  grpc::Status Undrain(grpc::ServerContext*, const v1::UndrainRequest*,
                       v1::UndrainResponse*) override;
  grpc::Status ResumeEngine(grpc::ServerContext*, const v1::ResumeEngineRequest*,
                            v1::ResumeEngineResponse*) override;
  grpc::Status GetRelay(grpc::ServerContext*, const v1::GetRelayRequest*,
                        v1::RelayStatus*) override;

  // wsyncd is stopping: its drain is final, so Undrain is refused from now on (it would take
  // updates that the exit then cuts). An Undrain already running ends first.
  void BeginStopping(const std::string& why);

 private:
  DaemonCore* core_;
  const Authorizer* auth_;
  std::string listen_;
  const RelaySubscribers* subscribers_;
  const RelayFeeders* feeders_;
  std::mutex stop_mu_;
  std::string stopping_;  // why; empty while running
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_ADMIN_SERVICE_H_
