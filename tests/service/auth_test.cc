// Who may do what: the unix socket's credentials and mode, TLS plus tokens on TCP, the admin
// role, and sessions bound to the connection that opened them.

#include <google/protobuf/descriptor.h>
#include <grp.h>
#include <grpcpp/generic/generic_stub.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "daemon/core/daemon_core.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/wsyncd/wsyncd_options.h"
#include "daemon/group_factories.h"
#include "daemon/service/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/recording_platform.h"
#include "wsync/v1/relay.grpc.pb.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "wsync-auth-", ::getpid());
    std::filesystem::create_directories(dir_);
    // Traversable by anyone, so that the socket's own mode decides who connects.
    ::chmod(dir_.c_str(), 0755);
    DaemonOptions options;
    options.mode = "host";
    options.slot_bytes = 1 << 16;
    options.slots_per_device = 2;
    core_ = std::make_unique<DaemonCore>(std::make_unique<RecordingPlatform>(&broadcasts_), options,
                                         DefaultGroupFactories());
  }
  void TearDown() override {
    server_.reset();
    core_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A self-signed certificate for localhost / 127.0.0.1, and the two tokens.
  void MakeTlsFiles() {
    int rc = 0;
    std::string out = RunCommand(
        absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                     "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ",
                     dir_, "/key.pem -out ", dir_, "/cert.pem"),
        &rc);
    ASSERT_EQ(rc, 0) << out;
    WriteFile(dir_ + "/trainer.token", "trainer-secret-1234\n");
    WriteFile(dir_ + "/admin.token", "admin-secret-5678\n");
    WriteFile(dir_ + "/wrong.token", "trainer-secret-1235\n");
    WriteFile(dir_ + "/relay.token", "relay-secret-9012\n");
  }

  ServerOptions TlsOptions() {
    ServerOptions o;
    o.tcp_listen = "127.0.0.1:0";
    o.tls_cert_file = dir_ + "/cert.pem";
    o.tls_key_file = dir_ + "/key.pem";
    o.token_file = dir_ + "/trainer.token";
    o.admin_token_file = dir_ + "/admin.token";
    return o;
  }

  std::unique_ptr<Client> TcpClient(const std::string& token_file) {
    ConnectOptions c;
    c.tls_ca_file = dir_ + "/cert.pem";
    c.token_file = token_file;
    c.tls_server_name = "localhost";
    auto client = Client::Connect(absl::StrCat("127.0.0.1:", server_->tcp_port()), c);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static grpc::StatusCode Drain(Client& c) {
    grpc::ClientContext ctx;
    v1::DrainRequest req;
    req.set_timeout_seconds(1);
    v1::DrainResponse resp;
    return c.admin()->Drain(&ctx, req, &resp).error_code();
  }
  static grpc::Status CloseSession(Client& c, const std::string& id) {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session_id(id);
    v1::CloseSessionResponse resp;
    return c.trainer()->CloseSession(&ctx, req, &resp);
  }
  static grpc::Status KeepAlive(Client& c, const std::string& id) {
    grpc::ClientContext ctx;
    v1::KeepAliveRequest req;
    req.set_session_id(id);
    v1::KeepAliveResponse resp;
    return c.trainer()->KeepAlive(&ctx, req, &resp);
  }

  std::string dir_;
  BroadcastLog broadcasts_;
  std::unique_ptr<DaemonCore> core_;
  std::unique_ptr<DaemonServer> server_;
};

TEST_F(AuthTest, ListenWithoutTlsAndATokenIsRefusedUnlessDeclaredInsecure) {
  ServerOptions o;
  o.tcp_listen = "127.0.0.1:0";
  auto refused = DaemonServer::Start(core_.get(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--tls-cert, --tls-key and --token-file"));
  o.insecure_listen = true;
  auto insecure = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(insecure.ok()) << insecure.status();
  server_ = std::move(*insecure);
  // An insecure listener makes every caller a trainer: pushing yes, draining no.
  auto client = Client::Connect(absl::StrCat("127.0.0.1:", server_->tcp_port()), ConnectOptions{});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->OpenSession(0, "insecure trainer").ok());
  EXPECT_EQ(Drain(**client), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, TcpCallersNeedTheTrainerTokenAndAdminCallsTheAdminToken) {
  MakeTlsFiles();
  auto started = DaemonServer::Start(core_.get(), TlsOptions());
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);

  auto nobody = TcpClient("");
  ASSERT_NE(nobody, nullptr);
  absl::Status s = nobody->OpenSession(0, "no token");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  auto wrong = TcpClient(dir_ + "/wrong.token");
  EXPECT_EQ(wrong->OpenSession(0, "wrong token").code(), absl::StatusCode::kUnauthenticated);

  auto trainer = TcpClient(dir_ + "/trainer.token");
  ASSERT_TRUE(trainer->OpenSession(0, "trainer").ok());
  {
    grpc::ClientContext ctx;
    v1::ListGroupsResponse groups;  // reading state is a trainer's right
    EXPECT_TRUE(trainer->admin()->ListGroups(&ctx, v1::ListGroupsRequest(), &groups).ok());
  }
  EXPECT_EQ(Drain(*trainer), grpc::StatusCode::PERMISSION_DENIED);

  auto admin = TcpClient(dir_ + "/admin.token");
  EXPECT_EQ(Drain(*admin), grpc::StatusCode::OK);
  grpc::ClientContext ctx;
  v1::UndrainResponse undrained;
  ASSERT_TRUE(admin->admin()->Undrain(&ctx, v1::UndrainRequest(), &undrained).ok());
  EXPECT_TRUE(undrained.was_draining());

  // Plain TCP against the TLS port gets nowhere.
  ConnectOptions plain;
  plain.timeout = absl::Seconds(1);
  EXPECT_FALSE(Client::Connect(absl::StrCat("127.0.0.1:", server_->tcp_port()), plain).ok());
}

// Every method of the three services, called with no token and with the trainer token: none may
// do anything for a caller without a role, and the admin-only and relay-only ones nothing for a
// trainer. A method added later without a check fails here.
TEST_F(AuthTest, EveryMethodRefusesACallerWithoutARoleAndAdminMethodsATrainer) {
  MakeTlsFiles();
  auto started = DaemonServer::Start(core_.get(), TlsOptions());
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  auto channel_with = [&](const std::string& token_file) {
    grpc::SslCredentialsOptions ssl;
    std::ifstream ca(dir_ + "/cert.pem");
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
    if (!token_file.empty()) {
      std::ifstream t(token_file);
      std::string token;
      t >> token;
      creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(token));
    }
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->tcp_port()), creds, args);
  };
  const std::set<std::string> admin_only = {"CreateGroup", "DestroyGroup", "Drain", "Undrain",
                                            "ResumeEngine"};
  const std::set<std::string> relay_only = {"Subscribe"};
  auto call = [](std::shared_ptr<grpc::Channel> channel, const std::string& method) {
    grpc::GenericStub stub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Slice empty("", 0);  // an empty message of any type
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  auto anonymous = channel_with("");
  auto trainer = channel_with(dir_ + "/trainer.token");
  int methods = 0;
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const google::protobuf::ServiceDescriptor* service :
       {pool->FindServiceByName("wsync.v1.Admin"), pool->FindServiceByName("wsync.v1.Trainer"),
        pool->FindServiceByName("wsync.v1.Relay")}) {
    ASSERT_NE(service, nullptr);
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string name = service->method(i)->name();
      const std::string path = absl::StrCat("/", service->full_name(), "/", name);
      ++methods;
      EXPECT_EQ(call(anonymous, path).error_code(), grpc::StatusCode::UNAUTHENTICATED) << path;
      if (admin_only.count(name) != 0 || relay_only.count(name) != 0) {
        EXPECT_EQ(call(trainer, path).error_code(), grpc::StatusCode::PERMISSION_DENIED) << path;
      }
    }
  }
  EXPECT_GE(methods, 19);
}

// The relay role (a downstream wsyncd's subscription) stands apart from trainer < admin: its
// token is good for no trainer or admin call, and the server refuses relay tokens that name no
// group or repeat another token.
TEST_F(AuthTest, ARelayTokenIsGoodForNoTrainerOrAdminCall) {
  MakeTlsFiles();
  ServerOptions o = TlsOptions();
  o.relay_token_files.push_back({dir_ + "/relay.token", {"policy"}});
  auto started = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  auto relay = TcpClient(dir_ + "/relay.token");
  ASSERT_NE(relay, nullptr);
  absl::Status session = relay->OpenSession(0, "a relay pretending to train");
  EXPECT_EQ(session.code(), absl::StatusCode::kPermissionDenied) << session;
  EXPECT_THAT(session.message(), HasSubstr("needs the trainer role"));
  EXPECT_THAT(session.message(), HasSubstr("relay token (groups policy)"));
  EXPECT_THAT(session.message(), HasSubstr("has the relay role"));
  {
    grpc::ClientContext ctx;
    v1::ListGroupsResponse groups;
    EXPECT_EQ(relay->admin()->ListGroups(&ctx, v1::ListGroupsRequest(), &groups).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(Drain(*relay), grpc::StatusCode::PERMISSION_DENIED);
  // The other tokens keep their roles beside it.
  auto admin = TcpClient(dir_ + "/admin.token");
  EXPECT_EQ(Drain(*admin), grpc::StatusCode::OK);
  server_.reset();

  ServerOptions no_group = TlsOptions();
  no_group.relay_token_files.push_back({dir_ + "/relay.token", {}});
  auto refused = DaemonServer::Start(core_.get(), no_group);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("names no group"));
  ServerOptions same = TlsOptions();
  same.relay_token_files.push_back({dir_ + "/trainer.token", {"policy"}});
  refused = DaemonServer::Start(core_.get(), same);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("must differ"));
  ServerOptions insecure;
  insecure.tcp_listen = "127.0.0.1:0";
  insecure.insecure_listen = true;
  insecure.relay_token_files.push_back({dir_ + "/relay.token", {"policy"}});
  refused = DaemonServer::Start(core_.get(), insecure);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << "relay tokens need TLS";
}

// Relay.Subscribe over TLS: only a relay token subscribes, only to the groups it names and the
// upstream has; an admitted subscription is held until its stream ends.
TEST_F(AuthTest, ASubscriptionIsAdmittedOnlyWithARelayTokenForItsGroups) {
  MakeTlsFiles();
  // A relay group whose one member is node rollout-1, and a group that relays to no daemon.
  const auto declare = [&](const char* name, const char* url, const char* kind,
                           const char* transport, std::shared_ptr<const EngineOptions> options) {
    GroupSpec spec;
    spec.name = name;
    spec.engines = {{url, 1}};
    spec.kind = kind;
    spec.transport = transport;
    spec.engine_options = std::move(options);
    return core_->DeclareGroup(spec);
  };
  ASSERT_TRUE(declare("policy", "wsyncd://rollout-1", "wsyncd", "relay",
                      std::make_shared<const WsyncdOptions>())
                  .ok());
  ASSERT_TRUE(declare("plain", "http://127.0.0.1:9", "sglang", "broadcast",
                      std::make_shared<const SglangOptions>())
                  .ok());
  WriteFile(dir_ + "/relay-later.token", "relay-secret-later\n");
  ServerOptions o = TlsOptions();
  o.relay_token_files.push_back({dir_ + "/relay.token", {"policy"}});
  o.relay_token_files.push_back({dir_ + "/relay-later.token", {"later", "plain"}});
  auto started = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  auto stub_with = [&](const std::string& token_file) {
    grpc::SslCredentialsOptions ssl;
    std::ifstream ca(dir_ + "/cert.pem");
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
    std::ifstream t(token_file);
    std::string token;
    t >> token;
    auto creds = grpc::CompositeChannelCredentials(grpc::SslCredentials(ssl),
                                                   grpc::AccessTokenCredentials(token));
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return v1::Relay::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->tcp_port()), creds, args));
  };
  v1::RelayUp subscribe;
  v1::RelaySubscribe* want = subscribe.mutable_subscribe();
  want->set_protocol_version(kRelayProtocolVersion);
  want->set_platform(std::string(core_->platform().name()));
  want->set_node("rollout-1");
  want->add_groups("policy");
  want->set_slot_bytes(1 << 20);
  // Sends `message` as the first message and returns the stream's end (or its admission).
  auto attempt = [&](const std::string& token_file, const v1::RelayUp& message,
                     v1::RelayDown* answer) {
    auto stub = stub_with(token_file);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    auto stream = stub->Subscribe(&ctx);
    stream->Write(message);
    stream->WritesDone();
    while (stream->Read(answer)) {
    }
    return stream->Finish();
  };
  v1::RelayDown answer;
  grpc::Status admin = attempt(dir_ + "/admin.token", subscribe, &answer);
  EXPECT_EQ(admin.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(admin.error_message(), HasSubstr("needs the relay role"));
  EXPECT_EQ(attempt(dir_ + "/trainer.token", subscribe, &answer).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // The other relay token names another group.
  grpc::Status other = attempt(dir_ + "/relay-later.token", subscribe, &answer);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(other.error_message(),
              HasSubstr("does not name group 'policy' (it names later, plain)"));
  // Named by its token, but not a group here.
  v1::RelayUp later = subscribe;
  later.mutable_subscribe()->set_groups(0, "later");
  EXPECT_EQ(attempt(dir_ + "/relay-later.token", later, &answer).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // A group that relays to no daemon, and a node the relay group does not name.
  v1::RelayUp to_plain = subscribe;
  to_plain.mutable_subscribe()->set_groups(0, "plain");
  grpc::Status not_relay = attempt(dir_ + "/relay-later.token", to_plain, &answer);
  EXPECT_EQ(not_relay.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(not_relay.error_message(), HasSubstr("feeds engines over broadcast"));
  v1::RelayUp stranger = subscribe;
  stranger.mutable_subscribe()->set_node("rollout-9");
  grpc::Status not_member = attempt(dir_ + "/relay.token", stranger, &answer);
  EXPECT_EQ(not_member.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(not_member.error_message(),
              HasSubstr("node rollout-9 is not a member of group 'policy' (its members: "
                        "wsyncd://rollout-1)"));
  v1::RelayUp small = subscribe;
  small.mutable_subscribe()->set_slot_bytes(1024);
  grpc::Status refused = attempt(dir_ + "/relay.token", small, &answer);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("subscription refused: the subscriber's slots"));
  EXPECT_TRUE(server_->relay_subscribers().List().empty());

  // Admitted: held while the stream lasts, gone when it ends.
  auto stub = stub_with(dir_ + "/relay.token");
  grpc::ClientContext ctx;
  auto stream = stub->Subscribe(&ctx);
  ASSERT_TRUE(stream->Write(subscribe));
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(answer.has_admitted());
  EXPECT_EQ(answer.admitted().subscriber_id(), "s1");
  EXPECT_EQ(answer.admitted().protocol_version(), kRelayProtocolVersion);
  ASSERT_EQ(server_->relay_subscribers().OfGroup("policy").size(), 1u);
  EXPECT_EQ(server_->relay_subscribers().OfGroup("policy")[0].subscription.node, "rollout-1");
  EXPECT_THAT(server_->relay_subscribers().List()[0].caller, HasSubstr("relay token"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  for (int i = 0; i < 100 && !server_->relay_subscribers().List().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(server_->relay_subscribers().List().empty());
}

TEST(RoleSatisfies, TheLadderHoldsAndTheRelayRoleStandsApart) {
  EXPECT_TRUE(RoleSatisfies(Role::kAdmin, Role::kTrainer));
  EXPECT_TRUE(RoleSatisfies(Role::kTrainer, Role::kTrainer));
  EXPECT_FALSE(RoleSatisfies(Role::kTrainer, Role::kAdmin));
  EXPECT_TRUE(RoleSatisfies(Role::kRelay, Role::kRelay));
  EXPECT_FALSE(RoleSatisfies(Role::kRelay, Role::kTrainer));
  EXPECT_FALSE(RoleSatisfies(Role::kRelay, Role::kAdmin));
  EXPECT_FALSE(RoleSatisfies(Role::kAdmin, Role::kRelay)) << "an admin token is not enough";
  EXPECT_FALSE(RoleSatisfies(Role::kTrainer, Role::kRelay));
  EXPECT_FALSE(RoleSatisfies(Role::kNone, Role::kTrainer));
}

TEST_F(AuthTest, ASessionIsUsedOnlyOverItsOwnConnectionAndClosedByItOrAnAdmin) {
  MakeTlsFiles();
  auto started = DaemonServer::Start(core_.get(), TlsOptions());
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  auto a = TcpClient(dir_ + "/trainer.token");
  auto b = TcpClient(dir_ + "/trainer.token");
  ASSERT_TRUE(a->OpenSession(0, "trainer a").ok());
  const std::string id = a->session_id();
  grpc::Status denied = CloseSession(*b, id);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("belongs to another connection"));
  EXPECT_EQ(KeepAlive(*b, id).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(KeepAlive(*a, id).ok());
  auto admin = TcpClient(dir_ + "/admin.token");
  EXPECT_TRUE(CloseSession(*admin, id).ok());
  EXPECT_EQ(KeepAlive(*a, id).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Each hold holds a server thread: a second one for the same session is refused, so a trainer
// cannot make wsyncd spawn threads by holding its session many times over.
TEST_F(AuthTest, ASessionIsHeldOnceAtATime) {
  auto started = DaemonServer::Start(core_.get(), ServerOptions{});
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  auto client = Client::FromChannel(server_->InProcessChannel());
  ASSERT_TRUE(client->OpenSession(0, "holder").ok());  // the client holds its session itself
  absl::SleepFor(absl::Milliseconds(300));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::HoldSessionRequest req;
  req.set_session_id(client->session_id());
  auto second = client->trainer()->HoldSession(&ctx, req);
  v1::HoldSessionEvent event;
  EXPECT_FALSE(second->Read(&event));
  grpc::Status s = second->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
}

TEST_F(AuthTest, TheSocketIs0600WithoutTheGroupAnd0660WithIt) {
  ServerOptions o;
  o.unix_socket = dir_ + "/private.sock";
  o.socket_group = "wsync-no-such-group";
  auto started = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(started.ok()) << started.status();
  struct stat st {};
  ASSERT_EQ(::stat(o.unix_socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  started->reset();

  const group* g = ::getgrgid(::getegid());
  ASSERT_NE(g, nullptr);
  o.unix_socket = dir_ + "/shared.sock";
  o.socket_group = g->gr_name;
  auto shared = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_EQ(::stat(o.unix_socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, g->gr_gid);
  EXPECT_THAT((*shared)->listen_description(), HasSubstr(absl::StrCat("0660 group ", g->gr_name)));
  shared->reset();
  // A numeric gid needs no group database entry (containers). Giving a file to a group one is
  // not in takes root.
  if (::geteuid() != 0) return;
  o.unix_socket = dir_ + "/by-gid.sock";
  o.socket_group = "4242";
  auto by_gid = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(by_gid.ok()) << by_gid.status();
  ASSERT_EQ(::stat(o.unix_socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 4242u);
}

// Another user on the unix socket: let in by the socket's group, a trainer by its credentials.
// Needs root, to run wsyncctl as uid/gid 65534 (nobody/nogroup); CI runs as root.
TEST_F(AuthTest, AnotherUserOnTheSocketIsATrainerNotAnAdmin) {
  if (::geteuid() != 0 || ::getgrnam("nogroup") == nullptr) {
    GTEST_SKIP() << "needs root and the nogroup group to act as another user";
  }
  ServerOptions o;
  o.unix_socket = dir_ + "/wsyncd.sock";
  o.socket_group = "wsync-no-such-group";
  auto private_server = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(private_server.ok()) << private_server.status();
  const std::string as_nobody =
      absl::StrCat("setpriv --reuid=65534 --regid=65534 --clear-groups ", WSYNCCTL_BIN,
                   " --timeout 5 --socket ", o.unix_socket, " ");
  int rc = 0;
  std::string out = RunCommand(as_nobody + "groups", &rc);
  EXPECT_NE(rc, 0) << out;  // 0600: not even connected
  EXPECT_THAT(out, HasSubstr("not answering"));
  private_server->reset();

  o.socket_group = "nogroup";
  auto started = DaemonServer::Start(core_.get(), o);
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  out = RunCommand(as_nobody + "groups", &rc);
  EXPECT_EQ(rc, 0) << out;
  out = RunCommand(as_nobody + "drain", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("Drain needs the admin role; uid 65534"));
  // Root, on the same socket, is an admin: it opens a session nobody may not close.
  auto root = Client::Connect("unix:" + o.unix_socket);
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_TRUE((*root)->OpenSession(0, "root trainer").ok());
  out = RunCommand(as_nobody + "close-session " + (*root)->session_id(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("belongs to another connection"));
  out = RunCommand(absl::StrCat(WSYNCCTL_BIN, " --socket ", o.unix_socket, " close-session ",
                                (*root)->session_id()),
                   &rc);
  EXPECT_EQ(rc, 0) << out;
  // One user cannot take every descriptor: past its allowance, its connections are closed at
  // once (the script counts how many of 80 the daemon closed within a second).
  out = RunCommand(
      absl::StrCat("setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '"
                   "import socket,time\n"
                   "cs=[]\n"
                   "for i in range(80):\n"
                   "  c=socket.socket(socket.AF_UNIX); c.connect(\"",
                   o.unix_socket,
                   "\"); c.settimeout(0.01); cs.append(c)\n"
                   "time.sleep(1); closed=0\n"
                   "for c in cs:\n"
                   "  try:\n"
                   "    closed += c.recv(1) == b\"\"\n"
                   "  except socket.timeout: pass\n"
                   "print(\"closed\", closed)'"),
      &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("closed ", 80 - UnixListener::kMaxConnectionsPerUser)));
}

}  // namespace
}  // namespace wsync
