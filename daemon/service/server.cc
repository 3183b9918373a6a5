#include "daemon/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/secret_file.h"
#include "common/status_macros.h"
#include "daemon/relay/subscription.h"

namespace wsync {
namespace {

// What TCP serving needs: TLS and tokens, unless the operator said the network is trusted.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    const ServerOptions& options, AuthOptions* auth) {
  const bool tls = !options.tls_cert_file.empty() || !options.tls_key_file.empty();
  if (options.insecure_listen) {
    if (tls || !options.token_file.empty() || !options.admin_token_file.empty() ||
        !options.relay_token_files.empty()) {
      return absl::InvalidArgumentError(
          "--insecure-listen serves plain TCP: it takes no TLS files or tokens");
    }
    auth->tcp_is_trainer_without_token = true;
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty() || options.token_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", options.tcp_listen,
        " would let anyone who reaches the port push weights: give --tls-cert, --tls-key and "
        "--token-file (and --admin-token-file for admin calls over TCP), or --insecure-listen "
        "on a trusted network"));
  }
  WSYNC_ASSIGN_OR_RETURN(std::string cert, ReadSecretFile(options.tls_cert_file, "TLS cert"));
  WSYNC_ASSIGN_OR_RETURN(std::string key, ReadSecretFile(options.tls_key_file, "TLS key"));
  WSYNC_ASSIGN_OR_RETURN(auth->trainer_token, ReadSecretFile(options.token_file, "token file"));
  if (!options.admin_token_file.empty()) {
    WSYNC_ASSIGN_OR_RETURN(auth->admin_token,
                           ReadSecretFile(options.admin_token_file, "admin token file"));
    if (auth->admin_token == auth->trainer_token) {
      return absl::InvalidArgumentError("the admin token must differ from the trainer token");
    }
  }
  for (const ServerOptions::RelayTokenFile& relay : options.relay_token_files) {
    if (relay.groups.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("relay token file ", relay.file,
                       " names no group: a relay token admits a downstream "
                       "wsyncd to the groups it names, and only to those"));
    }
    WSYNC_ASSIGN_OR_RETURN(std::string token, ReadSecretFile(relay.file, "relay token file"));
    if (token == auth->trainer_token || token == auth->admin_token) {
      return absl::InvalidArgumentError(
          absl::StrCat("relay token file ", relay.file,
                       " holds the trainer or admin token: a relay token "
                       "must differ from both (it admits subscriptions, and nothing else)"));
    }
    for (const AuthOptions::RelayToken& other : auth->relay_tokens) {
      if (other.token == token) {
        return absl::InvalidArgumentError(
            absl::StrCat("relay token file ", relay.file, " holds a token given twice"));
      }
    }
    for (const std::string& node : relay.nodes) {
      if (absl::Status s = CheckRelayNodeName(node); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("relay token file ", relay.file, ": ", s.message()));
      }
    }
    auth->relay_tokens.push_back({std::move(token), relay.groups, relay.nodes});
  }
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key + "\n", cert + "\n"});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

DaemonServer::DaemonServer(DaemonCore* core, std::string listen, AuthOptions auth,
                           std::unique_ptr<UnixListener> unix_listener, StreamLimits limits)
    : core_(core),
      listen_(std::move(listen)),
      unix_listener_(std::move(unix_listener)),
      auth_(std::make_shared<const Authorizer>(std::move(auth), unix_listener_.get())),
      streams_(limits),
      trainer_(core, auth_.get(), &streams_),
      relay_subscribers_(std::make_shared<RelaySubscribers>()),
      admin_(core, auth_.get(), listen_, relay_subscribers_.get(), &feeders_),
      relay_(core, auth_.get(), &streams_, relay_subscribers_.get()) {}

absl::StatusOr<std::unique_ptr<DaemonServer>> DaemonServer::Start(DaemonCore* core,
                                                                  const ServerOptions& options) {
  if (options.max_streams_per_connection < 1 || options.max_streams_per_caller < 1 ||
      options.stream_idle_timeout <= absl::ZeroDuration() ||
      options.handshake_timeout <= absl::ZeroDuration() || options.max_threads < 16) {
    return absl::InvalidArgumentError(
        "stream limits must be at least 1, timeouts above zero, and the server's threads at "
        "least 16");
  }
  if (!options.relay_token_files.empty() && options.tcp_listen.empty()) {
    return absl::InvalidArgumentError(
        "relay tokens are presented over TLS on --listen, which is not given: downstream "
        "wsyncds could not subscribe");
  }
  AuthOptions auth;
  auth.admin_group = options.admin_group;
  std::vector<std::string> listens;
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials;
  std::unique_ptr<TcpListener> tcp_listener;
  if (!options.tcp_listen.empty()) {
    WSYNC_ASSIGN_OR_RETURN(tcp_credentials, TcpCredentials(options, &auth));
    WSYNC_ASSIGN_OR_RETURN(tcp_listener, TcpListener::Listen(options.tcp_listen));
  }
  std::unique_ptr<UnixListener> unix_listener;
  if (!options.unix_socket.empty()) {
    WSYNC_ASSIGN_OR_RETURN(unix_listener,
                           UnixListener::Listen(options.unix_socket, options.socket_group));
    listens.push_back(
        absl::StrCat("unix:", options.unix_socket, " (", unix_listener->mode_description(), ")"));
  }
  if (!options.tcp_listen.empty()) {
    listens.push_back(absl::StrCat(options.tcp_listen,
                                   options.insecure_listen ? " (insecure)" : " (TLS + token)"));
  }
  StreamLimits limits;
  limits.per_connection = options.max_streams_per_connection;
  limits.per_caller = options.max_streams_per_caller;
  // A quarter of the threads stay for unary calls, whatever the streams do.
  limits.total = options.max_threads * 3 / 4;
  limits.idle_timeout = options.stream_idle_timeout;
  auto server = std::unique_ptr<DaemonServer>(new DaemonServer(
      core, absl::StrJoin(listens, ","), std::move(auth), std::move(unix_listener), limits));
  server->max_threads_ = options.max_threads;
  server->tcp_listener_ = std::move(tcp_listener);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(64 << 20);
  // Every sync call holds a thread for its life (update streams, session holds): bounded, so
  // callers cannot make wsyncd spawn threads without end. A node runs a few trainers, each with
  // a hold and an update at a time.
  grpc::ResourceQuota quota("wsyncd");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxCallsPerConnection);
  // The server pings its peers: a peer that vanished without a word (its host gone, a cable cut)
  // is noticed within a minute, and its long streams (a relay subscription, a held session) free
  // their server threads. Clients answer pings by default; nothing is asked of them.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  // Peers may ping as often (a relay feed pings every 30 s to notice a vanished upstream).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 20000);
  builder.AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(options.handshake_timeout),
                                         std::numeric_limits<int>::max())));
  {
    auto gate = std::make_unique<CallGate>(server->auth_.get(), &server->streams_);
    server->call_gate_ = gate.get();
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::move(gate));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  if (server->tcp_listener_) {
    // Calls without a token are refused before they reach a server thread.
    if (server->auth_->tcp_needs_token()) {
      tcp_credentials->SetAuthMetadataProcessor(std::make_shared<TokenGate>(server->auth_));
    }
    server->tcp_acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, tcp_credentials);
    server->tcp_port_ = server->tcp_listener_->port();
  }
  builder.RegisterService(&server->trainer_);
  builder.RegisterService(&server->admin_);
  builder.RegisterService(&server->relay_);
  server->server_ = builder.BuildAndStart();
  if (!server->server_) {
    return absl::UnavailableError(absl::StrCat("could not serve on ", server->listen_));
  }
  if (server->unix_listener_) server->unix_listener_->Serve(server->server_.get());
  if (server->tcp_listener_) server->tcp_listener_->Serve(server->tcp_acceptor_.get());
  SetProcessRelaySubscribers(server->relay_subscribers_);
  DaemonServer* raw = server.get();
  server->health_ = std::make_unique<HealthReporter>(core, server->server_->GetHealthCheckService(),
                                                     [raw] { return raw->CanServe(); });
  return server;
}

absl::Status DaemonServer::CanServe() const {
  // Near the end of the server's threads a new call may find none ("Server Threadpool
  // Exhausted"): a daemon that cannot take calls says so, and its watchdog acts.
  const int busy = call_gate_->busy_calls();
  if (busy >= max_threads_ * 7 / 8) {
    return absl::UnavailableError(absl::StrCat(busy, " of the ", max_threads_,
                                               " server threads are busy with calls: new calls "
                                               "may be refused"));
  }
  return absl::OkStatus();
}

DaemonServer::~DaemonServer() { Shutdown(absl::Seconds(1)); }

void DaemonServer::StartRelayFeeds(const std::vector<RelayFeedOptions>& feeds,
                                   const ResidentOptions& resident) {
  feeders_.Start(core_, feeds, resident);
}

void DaemonServer::StopRelayFeeds() { feeders_.Stop(); }

void DaemonServer::Shutdown(absl::Duration grace) {
  StopRelayFeeds();
  if (!server_) return;
  // No new connections are handed to a server that is shutting down.
  if (unix_listener_) unix_listener_->Stop();
  if (tcp_listener_) tcp_listener_->Stop();
  health_.reset();
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  server_.reset();
  if (ProcessRelaySubscribers() == relay_subscribers_) SetProcessRelaySubscribers(nullptr);
}

std::shared_ptr<grpc::Channel> DaemonServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

}  // namespace wsync
