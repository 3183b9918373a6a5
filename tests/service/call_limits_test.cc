// What a caller can hold of the server: streams bounded per connection, per caller and in all;
// streams that do not progress closed at a deadline; reflection and every stream refused to TCP
// callers without a token before they hold a thread; TCP connections bounded in number and in the
// time their handshake may take; health NOT_SERVING while the server's threads are nearly all
// busy; Undrain refused once wsyncd is stopping.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "common/net.h"
#include "daemon/core/daemon_core.h"
#include "daemon/group_factories.h"
#include "daemon/service/server.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/process_harness.h"
#include "tests/service/recording_platform.h"
#include "tests/service/stream_flood.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

constexpr char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kUpdate[] = "/wsync.v1.Trainer/Update";

class CallLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "wsync-limits-", ::getpid());
    std::filesystem::create_directories(dir_);
    DaemonOptions options;
    options.mode = "host";
    options.slot_bytes = 1 << 16;
    options.slots_per_device = 2;
    options.group.timeouts.control = absl::Seconds(1);
    options.group.timeouts.probe = absl::Seconds(1);
    core_ = std::make_unique<DaemonCore>(std::make_unique<RecordingPlatform>(&broadcasts_), options,
                                         DefaultGroupFactories());
  }
  void TearDown() override {
    server_.reset();
    core_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A self-signed certificate for localhost and 127.0.0.1, and a trainer token.
  void MakeTlsFiles() {
    auto [rc, out] = RunCommand(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", dir_ + "/key.pem", "-out", dir_ + "/cert.pem", "-days", "1", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"},
        dir_ + "/openssl.log");
    ASSERT_EQ(rc, 0) << out;
    std::ofstream(dir_ + "/trainer.token") << "trainer-secret-1234\n";
  }
  ServerOptions Options(bool tls) {
    ServerOptions o;
    o.unix_socket = dir_ + "/wsyncd.sock";
    if (tls) {
      o.tcp_listen = "127.0.0.1:0";
      o.tls_cert_file = dir_ + "/cert.pem";
      o.tls_key_file = dir_ + "/key.pem";
      o.token_file = dir_ + "/trainer.token";
    }
    return o;
  }
  void Start(const ServerOptions& o) {
    auto started = DaemonServer::Start(core_.get(), o);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
  }
  std::string Tcp() const { return absl::StrCat("127.0.0.1:", server_->tcp_port()); }
  std::shared_ptr<grpc::Channel> TlsChannel() {
    grpc::SslCredentialsOptions ssl;
    std::ifstream ca(dir_ + "/cert.pem");
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return OwnConnection(Tcp(), grpc::SslCredentials(ssl), args);
  }
  std::vector<std::shared_ptr<grpc::Channel>> UnixChannels(int n) {
    std::vector<std::shared_ptr<grpc::Channel>> out;
    for (int i = 0; i < n; ++i) out.push_back(OwnConnection("unix:" + dir_ + "/wsyncd.sock"));
    return out;
  }
  // The health of `service` asked over the unix socket: SERVING, NOT_SERVING or an error.
  std::string Health(const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(OwnConnection("unix:" + dir_ + "/wsyncd.sock"));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = stub->Check(&ctx, req, &resp);
    if (!s.ok()) return s.error_message();
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  }
  // An admin call over a connection of its own on the unix socket.
  grpc::Status GetStatus() {
    auto stub = v1::Admin::NewStub(OwnConnection("unix:" + dir_ + "/wsyncd.sock"));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::DaemonStatus status;
    return stub->GetStatus(&ctx, v1::GetStatusRequest(), &status);
  }

  std::string dir_;
  BroadcastLog broadcasts_;
  std::unique_ptr<DaemonCore> core_;
  std::unique_ptr<DaemonServer> server_;
};

TEST_F(CallLimitsTest, TcpCallsWithoutATokenAreRefusedBeforeTheyHoldAServerThread) {
  MakeTlsFiles();
  ServerOptions o = Options(true);
  o.max_threads = 64;
  Start(o);
  std::vector<std::shared_ptr<grpc::Channel>> strangers;
  for (int i = 0; i < 4; ++i) strangers.push_back(TlsChannel());
  // Twice the server's threads, reflection and update streams, none with a token.
  StreamFlood reflection(strangers, kReflection, 100, absl::Seconds(20));
  StreamFlood updates(strangers, kUpdate, 28, absl::Seconds(20));
  EXPECT_EQ(reflection.WaitEnded(absl::Seconds(5)), 100);
  EXPECT_EQ(updates.WaitEnded(absl::Seconds(5)), 28);
  EXPECT_EQ(reflection.Count(grpc::StatusCode::UNAUTHENTICATED), 100);
  EXPECT_EQ(updates.Count(grpc::StatusCode::UNAUTHENTICATED), 28);
  EXPECT_THAT(reflection.MessageOf(grpc::StatusCode::UNAUTHENTICATED),
              HasSubstr("without a token is not authenticated"));
  // A trainer with the token, an admin on the socket and the health service are all served.
  ConnectOptions c;
  c.tls_ca_file = dir_ + "/cert.pem";
  c.token_file = dir_ + "/trainer.token";
  c.tls_server_name = "localhost";
  auto trainer = Client::Connect(Tcp(), c);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_TRUE((*trainer)->OpenSession(0, "trainer").ok());
  EXPECT_TRUE(GetStatus().ok());
  EXPECT_EQ(Health(""), "SERVING");
  // The health check alone needs no token: probes and load balancers make it.
  auto health = grpc::health::v1::Health::NewStub(TlsChannel());
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok());
}

TEST_F(CallLimitsTest, StreamsAreBoundedPerConnectionPerCallerAndInAll) {
  ServerOptions o = Options(false);
  o.max_streams_per_connection = 4;
  o.max_streams_per_caller = 10;
  o.stream_idle_timeout = absl::Seconds(30);
  Start(o);
  {
    // One connection: 4 streams, the rest refused naming the limit.
    StreamFlood one(UnixChannels(1), kReflection, 6, absl::Seconds(30));
    one.WaitEnded(absl::Seconds(3), 2);
    absl::SleepFor(absl::Milliseconds(200));  // and no more
    EXPECT_EQ(one.ended(), 2);
    EXPECT_EQ(one.Count(grpc::StatusCode::RESOURCE_EXHAUSTED), 2);
    EXPECT_THAT(one.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED),
                HasSubstr("--max-streams-per-connection"));
  }
  absl::SleepFor(absl::Milliseconds(300));  // the server lets the cancelled streams go
  // Five connections of one user: 10 streams of any kind, the rest refused.
  StreamFlood many(UnixChannels(5), kReflection, 15, absl::Seconds(30));
  StreamFlood updates(UnixChannels(2), kUpdate, 4, absl::Seconds(30));
  for (int i = 0; i < 60 && many.ended() + updates.ended() < 9; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::SleepFor(absl::Milliseconds(200));  // and no more
  EXPECT_EQ(many.ended() + updates.ended(), 9);
  EXPECT_THAT(many.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED) +
                  updates.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED),
              HasSubstr("uid "));
  EXPECT_THAT(many.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED) +
                  updates.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED),
              HasSubstr("--max-streams-per-caller"));
  // Unary calls are still served, and health says so.
  EXPECT_TRUE(GetStatus().ok());
  EXPECT_EQ(Health(""), "SERVING");
  // Code inside wsyncd (the in-process channel) is not limited.
  auto inside = Client::FromChannel(server_->InProcessChannel());
  EXPECT_TRUE(inside->OpenSession(0, "inside").ok());
}

TEST_F(CallLimitsTest, TheStreamsOfAllCallersTogetherLeaveThreadsForOtherCalls) {
  ServerOptions o = Options(false);
  o.max_threads = 32;  // 24 streams at most
  o.max_streams_per_connection = 100;
  o.max_streams_per_caller = 100;
  o.stream_idle_timeout = absl::Seconds(30);
  Start(o);
  StreamFlood flood(UnixChannels(4), kReflection, 40, absl::Seconds(30));
  flood.WaitEnded(absl::Seconds(3), 16);
  absl::SleepFor(absl::Milliseconds(200));  // and no more
  EXPECT_EQ(flood.ended(), 16);
  EXPECT_THAT(flood.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED),
              HasSubstr("the most it takes from all callers together"));
  EXPECT_TRUE(GetStatus().ok());
}

TEST_F(CallLimitsTest, StreamsThatDoNotProgressEndAtTheDeadline) {
  ServerOptions o = Options(false);
  o.stream_idle_timeout = absl::Seconds(1);
  Start(o);
  StreamFlood updates(UnixChannels(1), kUpdate, 3, absl::Seconds(20));
  StreamFlood reflection(UnixChannels(1), kReflection, 3, absl::Seconds(20));
  EXPECT_EQ(updates.WaitEnded(absl::Seconds(5)), 3);
  EXPECT_EQ(reflection.WaitEnded(absl::Seconds(5)), 3);
  EXPECT_EQ(updates.Count(grpc::StatusCode::DEADLINE_EXCEEDED), 3);
  EXPECT_THAT(updates.MessageOf(grpc::StatusCode::DEADLINE_EXCEEDED),
              HasSubstr("Update: no begin within 1s of opening the stream"));
  EXPECT_THAT(updates.MessageOf(grpc::StatusCode::DEADLINE_EXCEEDED),
              HasSubstr("--stream-idle-timeout"));
  EXPECT_EQ(reflection.Count(grpc::StatusCode::DEADLINE_EXCEEDED), 3);
  EXPECT_THAT(reflection.MessageOf(grpc::StatusCode::DEADLINE_EXCEEDED), HasSubstr("no request"));
  for (const auto& e : updates.endings()) EXPECT_LT(e.after, absl::Seconds(3));

  // A trainer that begins in time keeps its stream past the deadline; its session's hold has
  // no deadline at all.
  auto client = Client::Connect("unix:" + dir_ + "/wsyncd.sock");
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->OpenSession(0, "in time").ok());
  absl::SleepFor(absl::Milliseconds(1500));
  grpc::ClientContext ctx;
  v1::KeepAliveRequest req;
  req.set_session_id((*client)->session_id());
  v1::KeepAliveResponse resp;
  EXPECT_TRUE((*client)->trainer()->KeepAlive(&ctx, req, &resp).ok()) << "the hold kept it";
}

// Each call of this test blocks a server thread for the engine probe's timeout (1 s): group
// creation asking an engine that accepts and never answers.
TEST_F(CallLimitsTest, HealthIsNotServingWhileTheServerThreadsAreNearlyAllBusy) {
  ServerOptions o = Options(false);
  o.max_threads = 48;  // NOT_SERVING from 42 busy
  Start(o);
  auto silent = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(silent.ok());
  const int port = *LocalPort(silent->get());
  EXPECT_EQ(Health(""), "SERVING");
  std::vector<std::thread> calls;
  auto admin = v1::Admin::NewStub(server_->InProcessChannel());
  for (int i = 0; i < 44; ++i) {
    calls.emplace_back([&, i] {
      v1::CreateGroupRequest req;
      req.mutable_spec()->set_name(absl::StrCat("silent", i));
      req.mutable_spec()->set_kind(v1::ENGINE_KIND_SGLANG);
      auto* e = req.mutable_spec()->add_engines();
      e->set_url(absl::StrCat("http://127.0.0.1:", port));
      e->set_ranks(1);
      grpc::ClientContext ctx;
      v1::GroupInfo info;
      (void)admin->CreateGroup(&ctx, req, &info);
    });
  }
  std::string seen;
  for (int i = 0; i < 30 && seen != "NOT_SERVING"; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    seen = Health("");
  }
  EXPECT_EQ(seen, "NOT_SERVING");
  EXPECT_EQ(Health("wsync.v1.Admin"), "NOT_SERVING");
  for (auto& t : calls) t.join();
  std::string after;
  for (int i = 0; i < 40 && after != "SERVING"; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    after = Health("");
  }
  EXPECT_EQ(after, "SERVING");
}

// Connections that never start TLS: at most kMaxConnectionsPerAddress kept from one address (the
// rest closed at once), and those closed at the handshake timeout; a TLS caller from another
// address and the unix socket are served all along.
TEST_F(CallLimitsTest, TcpConnectionsWithoutAHandshakeAreBoundedInNumberAndTime) {
  MakeTlsFiles();
  ServerOptions o = Options(true);
  o.handshake_timeout = absl::Seconds(1);
  Start(o);
  const int flood_size = TcpListener::kMaxConnectionsPerAddress + 100;
  std::vector<UniqueFd> flood;
  for (int i = 0; i < flood_size; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = ::inet_addr("127.0.0.2");
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(server_->tcp_port()));
    to.sin_addr.s_addr = ::inet_addr("127.0.0.1");
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    flood.push_back(std::move(fd));
  }
  auto closed_by_wsyncd = [&](absl::Duration within) {
    int closed = 0;
    for (UniqueFd& fd : flood) {
      char c;
      const absl::Status s = ReadExact(fd.get(), &c, 1, absl::Now() + within);
      closed += (!s.ok() && s.code() != absl::StatusCode::kDeadlineExceeded) ? 1 : 0;
    }
    return closed;
  };
  EXPECT_GE(closed_by_wsyncd(absl::Milliseconds(5)), 100);
  // During the flood: the socket, and a TLS trainer from 127.0.0.1.
  EXPECT_TRUE(GetStatus().ok());
  ConnectOptions c;
  c.tls_ca_file = dir_ + "/cert.pem";
  c.token_file = dir_ + "/trainer.token";
  c.tls_server_name = "localhost";
  auto trainer = Client::Connect(Tcp(), c);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_TRUE((*trainer)->OpenSession(0, "trainer").ok());
  // The kept ones end at the handshake timeout.
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_EQ(closed_by_wsyncd(absl::Seconds(2)), flood_size);
}

TEST_F(CallLimitsTest, UndrainIsRefusedOnceWsyncdIsStopping) {
  Start(Options(false));
  auto admin = v1::Admin::NewStub(server_->InProcessChannel());
  {
    grpc::ClientContext ctx;
    v1::DrainResponse drained;
    ASSERT_TRUE(admin->Drain(&ctx, v1::DrainRequest(), &drained).ok());
    grpc::ClientContext again;
    v1::UndrainResponse undrained;
    ASSERT_TRUE(admin->Undrain(&again, v1::UndrainRequest(), &undrained).ok());
    EXPECT_TRUE(undrained.was_draining()) << "an operator's drain can be undone";
  }
  server_->BeginStopping("it got signal 15");
  EXPECT_TRUE(core_->Drain(absl::Seconds(1)).drained);
  grpc::ClientContext ctx;
  v1::UndrainResponse undrained;
  grpc::Status s = admin->Undrain(&ctx, v1::UndrainRequest(), &undrained);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("wsyncd is stopping (it got signal 15)"));
  EXPECT_TRUE(core_->draining());
}

}  // namespace
}  // namespace wsync
