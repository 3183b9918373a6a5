#include "daemon/service/server.h"

#include <grpcpp/health_check_service_interface.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace wsync {
namespace {

// A socket file left by a crashed daemon blocks bind; one that still answers belongs to a live
// daemon and must not be taken over.
absl::Status PrepareSocketPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  if (live) {
    return absl::AlreadyExistsError(absl::StrCat("another wsyncd is already serving ", path));
  }
  std::filesystem::remove(path, ec);
  return absl::OkStatus();
}

}  // namespace

DaemonServer::DaemonServer(DaemonCore* core, std::string listen)
    : listen_(listen), trainer_(core), admin_(core, listen) {}

absl::StatusOr<std::unique_ptr<DaemonServer>> DaemonServer::Start(DaemonCore* core,
                                                                  const ServerOptions& options) {
  std::vector<std::string> listens;
  if (!options.unix_socket.empty()) listens.push_back(absl::StrCat("unix:", options.unix_socket));
  if (!options.tcp_listen.empty()) listens.push_back(options.tcp_listen);
  auto server = std::unique_ptr<DaemonServer>(new DaemonServer(core, absl::StrJoin(listens, ",")));
  server->unix_socket_ = options.unix_socket;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(64 << 20);
  if (!options.unix_socket.empty()) {
    if (absl::Status s = PrepareSocketPath(options.unix_socket); !s.ok()) return s;
    builder.AddListeningPort(absl::StrCat("unix:", options.unix_socket),
                             grpc::InsecureServerCredentials());
  }
  int tcp_port = 0;
  if (!options.tcp_listen.empty()) {
    builder.AddListeningPort(options.tcp_listen, grpc::InsecureServerCredentials(), &tcp_port);
  }
  builder.RegisterService(&server->trainer_);
  builder.RegisterService(&server->admin_);
  // The socket is created by BuildAndStart; a private umask makes it 0600 from the first moment.
  mode_t old = ::umask(0177);
  server->server_ = builder.BuildAndStart();
  ::umask(old);
  if (!server->server_) {
    return absl::UnavailableError(absl::StrCat("could not listen on ", server->listen_,
                                               " (path not writable, or address in use?)"));
  }
  if (!options.tcp_listen.empty() && tcp_port == 0) {
    return absl::UnavailableError(absl::StrCat("could not listen on TCP ", options.tcp_listen));
  }
  if (!options.unix_socket.empty()) ::chmod(options.unix_socket.c_str(), 0600);
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

DaemonServer::~DaemonServer() { Shutdown(absl::Seconds(1)); }

void DaemonServer::Shutdown(absl::Duration grace) {
  if (!server_) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  server_.reset();
  if (!unix_socket_.empty()) {
    std::error_code ec;
    std::filesystem::remove(unix_socket_, ec);
  }
}

std::shared_ptr<grpc::Channel> DaemonServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

}  // namespace wsync
