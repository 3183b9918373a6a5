#ifndef WSYNC_DAEMON_SERVICE_SERVER_H_
#define WSYNC_DAEMON_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/daemon_core.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/trainer_service.h"

namespace wsync {

struct ServerOptions {
  std::string unix_socket;  // empty: none
  std::string tcp_listen;   // host:port, empty: none
};

// The gRPC front of a DaemonCore: trainer, admin and grpc.health.v1 services.
class DaemonServer {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonServer>> Start(DaemonCore* core,
                                                             const ServerOptions& options);
  ~DaemonServer();
  void Shutdown(absl::Duration grace);
  // A channel into this server without a socket, for tests.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  std::string listen_description() const { return listen_; }

 private:
  DaemonServer(DaemonCore* core, std::string listen);
  std::string listen_;
  std::string unix_socket_;
  TrainerService trainer_;
  AdminService admin_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_SERVER_H_
