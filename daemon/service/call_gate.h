#ifndef WSYNC_DAEMON_SERVICE_CALL_GATE_H_
#define WSYNC_DAEMON_SERVICE_CALL_GATE_H_

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <memory>

#include "daemon/service/authorizer.h"
#include "daemon/service/stream_gate.h"

namespace wsync {

// Sees every call the server takes, through one interceptor per call:
//   - counts the calls in flight that hold a server thread (every call but the health
//     service's, which has a thread of its own), for the health reporter;
//   - holds the streams of services wsyncd does not implement itself (server reflection, the
//     health watch) to the StreamGate's limits and deadlines, as wsyncd's own handlers do theirs:
//     a stream without a role, or over a limit, is cancelled with its status before its handler
//     reads anything, and a stream's messages are its progress.
class CallGate : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  CallGate(const Authorizer* auth, StreamGate* streams) : auth_(auth), streams_(streams) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Calls in flight that hold a server thread.
  int busy_calls() const { return busy_.load(); }

 private:
  friend class CallWatch;
  const Authorizer* const auth_;
  StreamGate* const streams_;
  std::atomic<int> busy_{0};
};

// The TLS listener's first check, before a call reaches the server's threads: a call without a
// known token is refused (UNAUTHENTICATED), but for the health check, which load balancers and
// probes make without one. So a stranger's calls never hold a server thread, whatever they are.
class TokenGate : public grpc::AuthMetadataProcessor {
 public:
  static constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";

  // Holds the authorizer: gRPC may run Process after the server that made the gate is gone.
  explicit TokenGate(std::shared_ptr<const Authorizer> auth) : auth_(std::move(auth)) {}
  // Comparing tokens is quick: it runs on gRPC's own thread.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata* response) override;

 private:
  const std::shared_ptr<const Authorizer> auth_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_CALL_GATE_H_
