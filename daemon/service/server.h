#ifndef WSYNC_DAEMON_SERVICE_SERVER_H_
#define WSYNC_DAEMON_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/daemon_core.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/authorizer.h"
#include "daemon/service/health_reporter.h"
#include "daemon/service/trainer_service.h"
#include "daemon/service/unix_listener.h"

namespace wsync {

struct ServerOptions {
  std::string unix_socket;  // empty: none
  // The socket is 0660 with this group when the group exists (its members may connect), else
  // 0600.
  std::string socket_group = "wsync";
  // Unix callers in this group (and root, and the daemon's user) are admins.
  std::string admin_group = "wsync-admin";
  std::string tcp_listen;  // host:port, empty: none
  // TCP serves TLS with this certificate chain and key (PEM files), and takes callers that
  // present a token: the trainer token's holders are trainers, the admin token's admins.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string token_file;
  std::string admin_token_file;
  // Serve TCP without TLS or tokens (a trusted network only): every TCP caller is a trainer.
  bool insecure_listen = false;
};

// The gRPC front of a DaemonCore: trainer and admin services, grpc.health.v1 (per service, see
// HealthReporter) and server reflection, so generic gRPC tools can list and call the API.
class DaemonServer {
 public:
  static constexpr int kMaxServerThreads = 512;

  static absl::StatusOr<std::unique_ptr<DaemonServer>> Start(DaemonCore* core,
                                                             const ServerOptions& options);
  ~DaemonServer();
  void Shutdown(absl::Duration grace);
  // A channel into this server without a socket, for tests.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  std::string listen_description() const { return listen_; }
  // The TCP port --listen bound (useful with port 0), or 0.
  int tcp_port() const { return tcp_port_; }

 private:
  DaemonServer(DaemonCore* core, std::string listen, AuthOptions auth,
               std::unique_ptr<UnixListener> unix_listener);
  std::string listen_;
  int tcp_port_ = 0;
  std::unique_ptr<UnixListener> unix_listener_;
  Authorizer auth_;
  TrainerService trainer_;
  AdminService admin_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HealthReporter> health_;  // after server_, stopped before it
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_SERVER_H_
