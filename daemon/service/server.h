#ifndef WSYNC_DAEMON_SERVICE_SERVER_H_
#define WSYNC_DAEMON_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/daemon_core.h"
#include "daemon/relay/relay_feeder.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/authorizer.h"
#include "daemon/service/call_gate.h"
#include "daemon/service/health_reporter.h"
#include "daemon/service/relay_service.h"
#include "daemon/service/stream_gate.h"
#include "daemon/service/tcp_listener.h"
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
  // Relay tokens (a downstream wsyncd's subscription), each read from its file and good for the
  // groups it names only; each must differ from the other tokens.
  struct RelayTokenFile {
    std::string file;
    std::vector<std::string> groups;
    // The nodes that may subscribe with it (their RelaySubscribe.node); empty: any node the
    // groups name.
    std::vector<std::string> nodes = {};
  };
  std::vector<RelayTokenFile> relay_token_files;
  // Serve TCP without TLS or tokens (a trusted network only): every TCP caller is a trainer.
  bool insecure_listen = false;
  // Each stream holds a server thread for its life: how many one connection and one caller
  // (a unix user, a TCP address) may hold at once, and how long a stream may go without what it
  // owes (an update's begin, a reflection tool's next request) before it is closed.
  int max_streams_per_connection = 16;
  int max_streams_per_caller = 64;
  absl::Duration stream_idle_timeout = absl::Seconds(10);
  // How long a TCP connection may take to finish its TLS handshake and HTTP/2 preface.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // The server's threads: every call in flight holds one.
  int max_threads = 512;
};

// The gRPC front of a DaemonCore: trainer and admin services, grpc.health.v1 (per service, see
// HealthReporter) and server reflection, so generic gRPC tools can list and call the API.
//
// No caller without a role holds the server's threads: the TLS listener refuses calls without a
// token before they reach a thread (TokenGate), and every stream, wsyncd's own or reflection's,
// is admitted within limits per connection, per caller and in all, and closed when it does not
// progress (StreamGate, CallGate). TCP connections are bounded in number (TcpListener) and in
// the time their handshake may take; the unix socket has a limit per user (UnixListener).
class DaemonServer {
 public:
  // Calls one connection may have in flight (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; gRPC
  // clients queue calls past it).
  static constexpr int kMaxCallsPerConnection = 100;

  static absl::StatusOr<std::unique_ptr<DaemonServer>> Start(DaemonCore* core,
                                                             const ServerOptions& options);
  ~DaemonServer();
  void Shutdown(absl::Duration grace);
  // wsyncd is stopping (a signal): drains from now on are final, and Undrain is refused.
  void BeginStopping(const std::string& why) { admin_.BeginStopping(why); }
  // A channel into this server without a socket, for tests.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  std::string listen_description() const { return listen_; }
  // The TCP port --listen bound (useful with port 0), or 0.
  // The node relay's subscriptions held now (the upstream's side).
  const RelaySubscribers& relay_subscribers() const { return *relay_subscribers_; }
  // Starts the relay feeds of `options` (the downstream's side), once the groups they feed exist.
  void StartRelayFeeds(const std::vector<RelayFeedOptions>& feeds, const ResidentOptions& resident);
  // Ends them (each open update aborted), before the core goes.
  void StopRelayFeeds();
  // Each feed's resident version, where one is kept (for the metrics).
  std::vector<std::pair<RelayFeedOptions, ResidentVersion::View>> RelayResidents() const {
    return feeders_.Residents();
  }
  int tcp_port() const { return tcp_port_; }

 private:
  DaemonServer(DaemonCore* core, std::string listen, AuthOptions auth,
               std::unique_ptr<UnixListener> unix_listener, StreamLimits limits);
  // OK while the server has threads for new calls; else why not.
  absl::Status CanServe() const;

  DaemonCore* core_;
  std::string listen_;
  int tcp_port_ = 0;
  int max_threads_ = 0;
  std::unique_ptr<UnixListener> unix_listener_;
  std::unique_ptr<TcpListener> tcp_listener_;
  // Shared with the TCP credentials' token check, which gRPC may still run on its own thread for
  // a handshake in flight after the server is gone.
  std::shared_ptr<const Authorizer> auth_;
  StreamGate streams_;  // before the services, which admit their streams to it
  TrainerService trainer_;
  // Shared with the relay groups' members (ProcessRelaySubscribers), which may outlive the server.
  std::shared_ptr<RelaySubscribers> relay_subscribers_;
  RelayFeeders feeders_;
  AdminService admin_;
  RelayService relay_;
  CallGate* call_gate_ = nullptr;  // the server's interceptor factory, owned by server_
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> tcp_acceptor_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HealthReporter> health_;  // after server_, stopped before it
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_SERVER_H_
