#include "daemon/service/call_gate.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The health service answers on a thread of its own, not the server's.
constexpr absl::string_view kHealthService = "/grpc.health.v1.Health/";
// wsyncd's own services gate their streams in their handlers.
constexpr absl::string_view kOwnServices = "/wsync.v1.";

// What a stream of a service wsyncd does not implement must do to keep its place.
StreamRule RuleFor(absl::string_view method) {
  // A watch answers when the status changes: it waits by design, and holds no server thread.
  if (absl::StartsWith(method, kHealthService)) return StreamRule{StreamProgress::kNone, ""};
  // Reflection answers each request at once: a tool asks its questions and goes.
  if (absl::StrContains(method, "ServerReflection/")) {
    return StreamRule{StreamProgress::kEveryMessage, "request"};
  }
  return StreamRule{StreamProgress::kEveryMessage, "message"};
}

}  // namespace

class CallWatch : public grpc::experimental::Interceptor {
 public:
  CallWatch(CallGate* gate, grpc::experimental::ServerRpcInfo* info)
      : gate_(gate),
        info_(info),
        holds_thread_(!absl::StartsWith(info->method(), kHealthService)),
        gated_(info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY &&
               !absl::StartsWith(info->method(), kOwnServices)) {
    if (holds_thread_) ++gate_->busy_;
  }
  ~CallWatch() override {
    ticket_.Reset();
    if (holds_thread_) --gate_->busy_;
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (gated_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      Admit();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() != nullptr) {
      ticket_.Progress();
    }
    methods->Proceed();
  }

 private:
  // Takes the stream's place, or cancels the call with the refusal: its handler then reads
  // nothing and ends, and the caller gets the refusal's status.
  void Admit() {
    grpc::ServerContextBase* context = info_->server_context();
    const std::string method = info_->method();
    Caller caller;
    grpc::Status status = gate_->auth_->Require(*context, Role::kTrainer, method.c_str(), &caller);
    if (status.ok()) {
      auto ticket = gate_->streams_->Admit(caller, method, context->c_call(), RuleFor(method));
      if (ticket.ok()) {
        ticket_ = std::move(*ticket);
        return;
      }
      status = grpc::Status(static_cast<grpc::StatusCode>(ticket.status().code()),
                            std::string(ticket.status().message()));
    }
    grpc_call_cancel_with_status(context->c_call(),
                                 static_cast<grpc_status_code>(status.error_code()),
                                 status.error_message().c_str(), nullptr);
  }

  CallGate* const gate_;
  grpc::experimental::ServerRpcInfo* const info_;
  const bool holds_thread_;
  const bool gated_;
  StreamGate::Ticket ticket_;
};

grpc::experimental::Interceptor* CallGate::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new CallWatch(this, info);
}

grpc::Status TokenGate::Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                                OutputMetadata*) {
  std::string path;
  if (auto it = metadata.find(":path"); it != metadata.end()) {
    path.assign(it->second.data(), it->second.size());
  }
  if (path == kHealthCheck) return grpc::Status::OK;
  absl::string_view authorization;
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  if (auth_->TokenRole(authorization) != Role::kNone) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::UNAUTHENTICATED,
      absl::StrCat(path, ": a TCP caller ",
                   authorization.empty() ? "without a token" : "with an unknown token",
                   " is not authenticated (TCP callers present a token over TLS: "
                   "`authorization: Bearer <token>`)"));
}

}  // namespace wsync
