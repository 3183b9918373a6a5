// The fault matrix: each fault injected against a real host-mode wsyncd process with two SGLang
// simulator processes (3 engine ranks), measured the same way:
//   - detection: from the injection to wsyncd's answer (the failed update, the refused call, the
//     closed connection); the slowest of the rounds below;
//   - wsyncd is still up (running, answering the admin API);
//   - the next update succeeds, every engine rank holding its bytes;
//   - no leak: each fault is injected kFaultRounds times, each followed by an update. wsyncd at
//     rest after the last round must hold no more threads, descriptors, mappings or shared memory
//     than at rest after the first (what a first fault makes once and keeps, such as the glibc
//     stack cache of a peak of threads, is in both; a leak of one of anything per fault is not).
// The node relay's faults (several wsyncds) are rows of the same table, in relay_faults_test.cc.
// The binary runs every fault in one process and prints the table at the end (and writes it as
// markdown to WSYNC_FAULT_TABLE when set): docs/RELIABILITY.md keeps a run's figures.

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "daemon/service/tcp_listener.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/reliability/bad_buckets.h"
#include "tests/reliability/fault_rows.h"
#include "tests/reliability/process_resources.h"
#include "tests/reliability/real_cluster.h"
#include "tests/reliability/test_models.h"
#include "tests/reliability/tls_files.h"
#include "tests/service/stream_flood.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// A flood of streams starts and ends a server thread per stream (and each round of a restart
// row is a new wsyncd, whose start ran threads of its own). An ended thread's stack (two
// anonymous mappings) stays in glibc's cache, which keeps up to 40 MiB of them (four 8 MiB
// stacks); how many it holds at rest depends on which threads ended last, so anonymous mappings
// may differ by those four stacks. gRPC's default executor, idle at one thread, grows to two per
// core under the flood and keeps them (each with a stack: two mappings). wsyncd's own threads
// and its descriptors stay exact.
const LeakTolerance kThreadChurn = [] {
  const int executor = 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return LeakTolerance{.threads = 0,
                       .library_threads = 2 + executor,
                       .fds = 0,
                       .file_maps = 0,
                       .anon_maps = kAnonMapsNoise + 8 + 2 * executor,
                       .shm = 0};
}();

std::string CodeAndMessage(const absl::Status& s, size_t keep = 110) {
  std::string m(s.message());
  if (m.size() > keep) m = m.substr(0, keep) + "...";
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", m);
}

class FaultMatrix : public ::testing::Test {
 protected:
  // One round's injection: it sets detection (seconds) and what wsyncd said, and leaves the
  // engines able to take the next update (an engine the fault stopped is started again).
  struct Injected {
    double detection_s = -1;
    std::string detected_as;
    int inputs = 1;
  };

  void StartCluster(std::vector<std::string> extra_flags = {}, int control_timeout_s = 5) {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = absl::StrCat(::testing::TempDir(), "/wsync-faults-", ::getpid(), "-", name);
    cluster_ = std::make_unique<RealCluster>(ClusterOptions{
        .wsyncd_bin = WSYNCD_BIN,
        .dir = dir_,
        .bucket_timeout_s = 3,
        .control_timeout_s = control_timeout_s,
        .extra_flags = std::move(extra_flags),
    });
    ASSERT_TRUE(cluster_->Start().ok()) << cluster_->DaemonLog();
    ASSERT_TRUE(OpenClient("fault matrix"));
    for (uint32_t v : {1, 2}) {
      absl::Status s =
          cluster_->PushAndVerify(*client_, absl::StrCat("warm", v), ModelWithOversizeTensor(v));
      ASSERT_TRUE(s.ok()) << s << cluster_->DaemonLog();
    }
    row_.fault = name;
  }

  bool OpenClient(const std::string& name) {
    auto client = cluster_->Connect();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return false;
    client_ = std::move(*client);
    const absl::Status s = client_->OpenSession(0, name);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }

  // Injects the fault kFaultRounds times; after each, wsyncd must be up and the next update good.
  void RunRounds(const std::function<Injected(int round)>& inject,
                 const LeakTolerance& tolerance = kNoLeak) {
    ProcessResources first;
    std::string first_threads;
    for (int round = 1; round <= kFaultRounds; ++round) {
      const Injected got = inject(round);
      if (::testing::Test::HasFatalFailure()) return;
      row_.inputs += got.inputs;
      if (got.detection_s > row_.detection_s) {
        row_.detection_s = got.detection_s;
        row_.detected_as = got.detected_as;
      }
      const bool up = cluster_->DaemonUp();
      row_.daemon_up = row_.daemon_up && up;
      ASSERT_TRUE(up) << "round " << round << "\n" << cluster_->DaemonLog();
      if (client_ == nullptr || client_->session_id().empty()) {
        ASSERT_TRUE(OpenClient("after the fault"));
      }
      const absl::Status next =
          cluster_->PushAndVerify(*client_, absl::StrCat("next", round), SmallModel(70 + round));
      row_.next_update_ok = row_.next_update_ok && next.ok();
      ASSERT_TRUE(next.ok()) << "round " << round << ": " << next << "\n" << cluster_->DaemonLog();
      if (round == 1) {
        first = IdleResources(cluster_->daemon_pid());
        first_threads = ThreadNames(cluster_->daemon_pid());
      }
    }
    const ProcessResources last = SettledResources(cluster_->daemon_pid(), first, tolerance);
    row_.leaks = LeaksBetween(first, last, tolerance);
    EXPECT_EQ(row_.leaks, "none") << "after round 1: " << first.Describe() << " (" << first_threads
                                  << "); after round " << kFaultRounds << ": " << last.Describe()
                                  << " (" << ThreadNames(cluster_->daemon_pid()) << ")";
  }

  void TearDown() override {
    if (!row_.fault.empty()) FaultRows().push_back(row_);
    client_.reset();
    cluster_.reset();
  }

  // The engine's count of update requests, which the knobs' indexes refer to.
  int UpdatesReceived(int engine) {
    auto n = cluster_->SetKnobs(engine, nlohmann::json::object());
    EXPECT_TRUE(n.ok());
    return n.ok() ? *n : -1;
  }

  // Pushes a version the fault must fail; the injection's detection is how long wsyncd took.
  Injected TimedFailingPush(const std::string& version, absl::Status* status) {
    const absl::Time t0 = absl::Now();
    auto pushed = client_->Push("policy", version, Refs(SmallModel(9)));
    Injected out;
    out.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    EXPECT_FALSE(pushed.ok()) << "the fault went unnoticed";
    *status = pushed.ok() ? absl::OkStatus() : pushed.status();
    out.detected_as = CodeAndMessage(*status);
    return out;
  }

  std::unique_ptr<RealCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::string dir_;
  FaultRow row_;
};

TEST_F(FaultMatrix, EngineAnswersHttp500) {
  StartCluster();
  RunRounds([&](int round) {
    EXPECT_TRUE(cluster_->SetKnobs(1, {{"fail_update_at", UpdatesReceived(1)}}).ok());
    absl::Status s;
    Injected got = TimedFailingPush(absl::StrCat("v500-", round), &s);
    EXPECT_THAT(std::string(s.message()), HasSubstr(cluster_->engine_url(1)));
    EXPECT_THAT(std::string(s.message()), HasSubstr("HTTP 500"));
    // Both engines took part of the version: neither may serve that mix.
    const absl::Status held = cluster_->EnginesHeldBack();
    EXPECT_TRUE(held.ok()) << held;
    return got;
  });
}

TEST_F(FaultMatrix, EngineHangsPastTheBucketDeadline) {
  StartCluster();
  RunRounds([&](int round) {
    EXPECT_TRUE(cluster_->SetKnobs(1, {{"hang_update_at", UpdatesReceived(1)}}).ok());
    absl::Status s;
    Injected got = TimedFailingPush(absl::StrCat("vhang-", round), &s);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_LT(got.detection_s, 3 + 2.0) << "the bucket deadline is 3 s";
    // A hung engine stays hung: its operator restarts it.
    cluster_->StopEngine(1, SIGKILL);
    EXPECT_TRUE(cluster_->StartEngine(1).ok());
    return got;
  });
}

TEST_F(FaultMatrix, EngineDiesMidBucket) {
  StartCluster();
  RunRounds([&](int round) {
    EXPECT_TRUE(cluster_->SetKnobs(1, {{"die_at_update", UpdatesReceived(1)}}).ok());
    absl::Status s;
    Injected got = TimedFailingPush(absl::StrCat("vdie-", round), &s);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(cluster_->engine_url(1)));
    EXPECT_TRUE(cluster_->StartEngine(1).ok());
    return got;
  });
}

TEST_F(FaultMatrix, EngineRestartsBetweenUpdates) {
  StartCluster();
  RunRounds([&](int round) {
    cluster_->StopEngine(0, SIGKILL);
    EXPECT_TRUE(cluster_->StartEngine(0).ok());
    // Seen when the next update begins (the store saw the rank's connection close), and the
    // group forms again before it: the detection column is that whole update.
    const absl::Time t0 = absl::Now();
    const absl::Status s =
        cluster_->PushAndVerify(*client_, absl::StrCat("vrestart-", round), SmallModel(5));
    Injected got;
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    EXPECT_TRUE(s.ok()) << s << cluster_->DaemonLog();
    got.detected_as =
        s.ok() ? "the next update re-formed the group first, and succeeded" : CodeAndMessage(s);
    return got;
  });
  EXPECT_THAT(cluster_->DaemonLog(), HasSubstr("re-forming it before the update"));
}

TEST_F(FaultMatrix, TrainerKilledMidUpdate) {
  StartCluster();
  RunRounds([&](int round) -> Injected {
    // The killed trainer is its own process (wsync-push) on the device's slots: this one steps
    // aside, and the engines take 100 ms a bucket so that its update is still running.
    EXPECT_TRUE(client_->CloseSession().ok());
    client_.reset();
    for (int e = 0; e < RealCluster::kEngines; ++e) {
      EXPECT_TRUE(cluster_->SetKnobs(e, {{"answer_delay_ms", 100}}).ok());
    }
    const int before = UpdatesReceived(0);
    const std::string prefix = absl::StrCat("killed", round, "-");
    ChildProcess pusher({WSYNC_PUSH_BIN, "--socket", cluster_->socket(), "--group", "policy",
                         "--model-gib", "0.03", "--version-prefix", prefix},
                        absl::StrCat(dir_, "/push-", round, ".log"));
    const absl::Time started = absl::Now();
    while (UpdatesReceived(0) < before + 2 && absl::Now() - started < absl::Seconds(20)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(pusher.running()) << "its update ended before it was killed: " << pusher.Log();
    pusher.Signal(SIGKILL);
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(pusher.Wait(absl::Seconds(5)), 128 + SIGKILL);
    // Detected once its update is over and its session has let go of the slots.
    std::string state = "running";
    auto fresh = cluster_->Connect();
    EXPECT_TRUE(fresh.ok());
    absl::Status opened = absl::UnknownError("not tried");
    while (fresh.ok() && absl::Now() - t0 < absl::Seconds(30)) {
      auto updates = cluster_->Updates();
      for (const v1::UpdateRecord& u : updates.ok() ? *updates : std::vector<v1::UpdateRecord>()) {
        if (u.version() == prefix + "1") state = u.state();
      }
      if (state != "running") opened = (*fresh)->OpenSession(0, "after the killed trainer");
      if (opened.ok()) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    Injected got;
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    EXPECT_TRUE(opened.ok()) << opened << cluster_->DaemonLog();
    EXPECT_THAT(state, ::testing::AnyOf("aborted", "failed"));
    const absl::Status held = cluster_->EnginesHeldBack();
    EXPECT_TRUE(held.ok()) << held;
    got.detected_as = absl::StrCat("its update ", state, ", its session closed, the slots free");
    for (int e = 0; e < RealCluster::kEngines; ++e) {
      EXPECT_TRUE(cluster_->SetKnobs(e, {{"answer_delay_ms", 0}}).ok());
    }
    if (fresh.ok()) client_ = std::move(*fresh);
    return got;
  });
}

TEST_F(FaultMatrix, TrainerTruncatesItsSlot) {
  StartCluster();
  RunRounds([&](int round) -> Injected {
    // The trainer's raw session: the reply names each slot's shared memory.
    EXPECT_TRUE(client_->CloseSession().ok());
    v1::OpenSessionRequest open;
    open.set_device(0);
    open.set_client_name("truncating trainer");
    v1::OpenSessionResponse session;
    {
      grpc::ClientContext ctx;
      EXPECT_TRUE(client_->trainer()->OpenSession(&ctx, open, &session).ok());
    }
    const v1::SlotInfo& info = session.slots(round % 2);
    const int fd = ::shm_open(info.memory_handle().c_str(), O_RDWR, 0);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, round == 2 ? 100 : 0), 0);
    ::close(fd);
    v1::Bucket bucket;
    bucket.set_slot(info.index());
    *bucket.add_tensors() = Spec("a", "uint8", {4096}, 0, 4096);
    const absl::Time t0 = absl::Now();
    const absl::Status s = SendRawBucketAs(client_->trainer(), session.session_id(), bucket);
    Injected got;
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    got.detected_as = CodeAndMessage(s);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    grpc::ClientContext ctx;
    v1::CloseSessionRequest close;
    close.set_session_id(session.session_id());
    v1::CloseSessionResponse closed;
    EXPECT_TRUE(client_->trainer()->CloseSession(&ctx, close, &closed).ok());
    client_.reset();  // the next update's session gets the slot grown back whole
    return got;
  });
}

TEST_F(FaultMatrix, MalformedBucketManifests) {
  StartCluster();
  RunRounds([&](int round) {
    const int received[] = {UpdatesReceived(0), UpdatesReceived(1)};
    const std::vector<BadBucket> bad = BadBuckets(client_->slot_bytes());
    Injected got;
    got.inputs = static_cast<int>(bad.size());
    got.detection_s = 0;
    std::set<std::string> codes;
    for (const BadBucket& b : bad) {
      const absl::Time t0 = absl::Now();
      const absl::Status s = SendRawBucket(*client_, b.bucket);
      got.detection_s = std::max(got.detection_s, absl::ToDoubleSeconds(absl::Now() - t0));
      // Refused, with a code that says the trainer's bucket is wrong.
      EXPECT_FALSE(s.ok()) << b.what;
      if (!b.refused_by_grpc) {
        EXPECT_THAT(s.code(), ::testing::AnyOf(absl::StatusCode::kInvalidArgument,
                                               absl::StatusCode::kDataLoss,
                                               absl::StatusCode::kFailedPrecondition))
            << b.what << ": " << s;
      }
      codes.insert(std::string(absl::StatusCodeToString(s.code())));
      EXPECT_TRUE(cluster_->DaemonUp()) << b.what;
    }
    // Not one byte of a refused bucket reached an engine.
    EXPECT_EQ(UpdatesReceived(0), received[0]);
    EXPECT_EQ(UpdatesReceived(1), received[1]);
    got.detected_as = absl::StrCat("each refused before any byte moved (",
                                   absl::StrJoin(codes, ", "), "); the slowest refusal");
    return got;
  });
}

// The group's rendezvous store, as the engines reach it.
uint16_t StorePort(RealCluster& cluster) {
  auto group = cluster.Group();
  EXPECT_TRUE(group.ok());
  int port = 0;
  const std::string r = group.ok() ? group->rendezvous() : "";
  EXPECT_TRUE(absl::SimpleAtoi(r.substr(r.rfind(':') + 1), &port)) << r;
  return static_cast<uint16_t>(port);
}

// Whether the peer closes `fd` within `within` (what it sends is read and dropped).
bool ClosedByPeer(int fd, absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  char c;
  while (absl::Now() < deadline) {
    absl::Status s = ReadExact(fd, &c, 1, std::min(deadline, absl::Now() + absl::Seconds(1)));
    if (!s.ok() && s.code() != absl::StatusCode::kDeadlineExceeded) return true;
  }
  return false;
}

std::string U64(uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }
std::string Str(const std::string& s) { return U64(s.size()) + s; }
const std::string kValidate("\x00\xce\xf7\x85\x3c", 5);

TEST_F(FaultMatrix, StoreClientFlood) {
  StartCluster();
  RunRounds([&](int round) {
    const uint16_t port = StorePort(*cluster_);
    // A client that asks for 16 MiB of replies and never reads them.
    auto greedy = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(greedy.ok());
    std::string frames = kValidate + "\x01" + Str("/flood/big") + Str(std::string(1 << 20, 'b'));
    for (int i = 0; i < 16; ++i) frames += "\x03" + Str("/flood/big");
    (void)WriteAll(greedy->get(), frames.data(), frames.size(), absl::Now() + absl::Seconds(10));
    // Then 400 connections at once: a third validated, a third half a frame in, a third idle.
    const absl::Time t0 = absl::Now();
    std::vector<UniqueFd> flood;
    for (int i = 0; i < 400; ++i) {
      auto fd = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
      if (!fd.ok()) continue;
      const std::string hello = i % 3 == 0   ? kValidate
                                : i % 3 == 1 ? kValidate + "\x01" + U64(9)
                                             : "";
      (void)WriteAll(fd->get(), hello.data(), hello.size(), absl::Now() + absl::Seconds(1));
      flood.push_back(std::move(*fd));
    }
    // The store keeps at most its connection limit and closes the rest at once.
    int closed = 0;
    for (UniqueFd& fd : flood) closed += ClosedByPeer(fd.get(), absl::Milliseconds(20)) ? 1 : 0;
    Injected got;
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    got.inputs = static_cast<int>(flood.size()) + 1;
    got.detected_as = absl::StrCat(closed, " of ", flood.size(),
                                   " connections closed at once (over the store's limit)");
    EXPECT_GE(closed, static_cast<int>(flood.size()) - 16);
    // With the flood still connected, an update: the engines' connections and the store's
    // event loop are not held up by it.
    const absl::Status during =
        cluster_->PushAndVerify(*client_, absl::StrCat("vflood-", round), SmallModel(6));
    EXPECT_TRUE(during.ok()) << during << cluster_->DaemonLog();
    return got;
  });
}

TEST_F(FaultMatrix, NonTorchClientOnTheStorePort) {
  StartCluster();
  RunRounds([&](int) {
    const uint16_t port = StorePort(*cluster_);
    const std::vector<std::string> strangers = {
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),  // a TLS ClientHello
        "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
        std::string("\x01") + Str("/k") + Str("v"),  // a torch SET without VALIDATE
        std::string("\x00\x00\x00\x00\x00", 5),      // VALIDATE with the wrong magic
        std::string(4096, '\xff'),
    };
    Injected got;
    got.inputs = static_cast<int>(strangers.size());
    got.detection_s = 0;
    int closed = 0;
    for (const std::string& bytes : strangers) {
      auto fd = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
      EXPECT_TRUE(fd.ok());
      if (!fd.ok()) continue;
      const absl::Time t0 = absl::Now();
      (void)WriteAll(fd->get(), bytes.data(), bytes.size(), absl::Now() + absl::Seconds(2));
      const bool gone = ClosedByPeer(fd->get(), absl::Seconds(5));
      got.detection_s = std::max(got.detection_s, absl::ToDoubleSeconds(absl::Now() - t0));
      EXPECT_TRUE(gone) << absl::CHexEscape(bytes.substr(0, 16));
      closed += gone ? 1 : 0;
    }
    got.detected_as = absl::StrCat(closed, " of ", strangers.size(),
                                   " closed at their first frame; the slowest close");
    return got;
  });
}

// A self-signed certificate for localhost and 127.0.0.1, and two tokens, made for the test.
// An HTTP/2 client preface without TLS, as a plain gRPC client sends it.
const std::string kPlainGrpcPreface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                                      std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);

TEST_F(FaultMatrix, UnauthenticatedTcpCaller) {
  const std::string tls_dir = absl::StrCat(::testing::TempDir(), "/wsync-faults-tls-", ::getpid());
  std::filesystem::create_directories(tls_dir);
  auto tls = MakeTlsFiles(tls_dir);
  ASSERT_TRUE(tls.ok()) << tls.status();
  const int tcp_port = FreePort();
  const std::string listen = absl::StrCat("127.0.0.1:", tcp_port);
  StartCluster({"--listen", listen, "--tls-cert", tls->cert, "--tls-key", tls->key, "--token-file",
                tls->token, "--admin-token-file", tls->admin_token});
  const std::string wrong_token = tls_dir + "/wrong";
  std::ofstream(wrong_token) << "guess\n";
  auto options = [&](std::string token) {
    ConnectOptions o;
    o.tls_ca_file = tls->cert;
    o.token_file = std::move(token);
    o.tls_server_name = "localhost";
    return o;
  };
  RunRounds([&](int) {
    Injected got;
    got.inputs = 4;
    got.detection_s = 0;
    std::vector<std::string> seen;
    auto timed = [&](const std::string& what, const std::function<absl::Status()>& call) {
      const absl::Time t0 = absl::Now();
      const absl::Status s = call();
      got.detection_s = std::max(got.detection_s, absl::ToDoubleSeconds(absl::Now() - t0));
      seen.push_back(absl::StrCat(what, ": ", absl::StatusCodeToString(s.code())));
      return s;
    };
    auto open_session = [&](const std::string& token) {
      auto client = Client::Connect(listen, options(token));
      return client.ok() ? (*client)->OpenSession(1, "stranger") : client.status();
    };
    EXPECT_EQ(timed("TLS, no token", [&] { return open_session(""); }).code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(timed("TLS, wrong token", [&] { return open_session(wrong_token); }).code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(timed("trainer token, admin call",
                    [&] {
                      auto client = Client::Connect(listen, options(tls->token));
                      if (!client.ok()) return client.status();
                      v1::DestroyGroupRequest req;
                      req.set_name("policy");
                      v1::DestroyGroupResponse resp;
                      grpc::ClientContext ctx;
                      grpc::Status g = (*client)->admin()->DestroyGroup(&ctx, req, &resp);
                      return absl::Status(static_cast<absl::StatusCode>(g.error_code()),
                                          g.error_message());
                    })
                  .code(),
              absl::StatusCode::kPermissionDenied);
    // Plain gRPC to the TLS port: the handshake fails and wsyncd closes the connection.
    const absl::Status plain = timed("plain TCP", [&] {
      auto fd =
          ConnectTcp("127.0.0.1", static_cast<uint16_t>(tcp_port), absl::Now() + absl::Seconds(5));
      if (!fd.ok()) return fd.status();
      (void)WriteAll(fd->get(), kPlainGrpcPreface.data(), kPlainGrpcPreface.size(),
                     absl::Now() + absl::Seconds(2));
      return ClosedByPeer(fd->get(), absl::Seconds(10)) ? absl::UnavailableError("closed")
                                                        : absl::DeadlineExceededError("still open");
    });
    EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable) << "wsyncd kept a plain connection";
    EXPECT_TRUE(cluster_->Group().ok()) << "the group is still there";
    got.detected_as = absl::StrJoin(seen, "; ");
    return got;
  });
}

// A service at an engine's address whose /get_server_info is JSON, but not SGLang's: wsyncd
// refuses to make a group of it and stays up.
TEST_F(FaultMatrix, NonEngineAnswersServerInfo) {
  StartCluster();
  httplib::Server fake;
  fake.Get("/get_server_info", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"version": 3, "tp_size": "2", "pp_size": [1], "weight_version": {}})",
                    "application/json");
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { fake.listen_after_bind(); });
  RunRounds([&](int round) {
    v1::CreateGroupRequest req;
    req.mutable_spec()->set_name(absl::StrCat("stranger", round));
    req.mutable_spec()->set_kind(v1::ENGINE_KIND_SGLANG);
    auto* e = req.mutable_spec()->add_engines();
    e->set_url(absl::StrCat("http://127.0.0.1:", port));
    e->set_ranks(2);
    grpc::ClientContext ctx;
    v1::GroupInfo info;
    const absl::Time t0 = absl::Now();
    grpc::Status g = cluster_->admin().admin()->CreateGroup(&ctx, req, &info);
    Injected got;
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    const absl::Status s(static_cast<absl::StatusCode>(g.error_code()), g.error_message());
    got.detected_as = CodeAndMessage(s);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    return got;
  });
  fake.stop();
  serving.join();
}

// A trainer that begins an update and then sends nothing: before, the engines stayed paused for
// as long as its stream lived. The bucket timeout (3 s here) ends the update, and the engines,
// which got no byte of it, serve again.
TEST_F(FaultMatrix, TrainerSilentAfterBegin) {
  StartCluster();
  RunRounds([&](int round) {
    UpdateStream stream(client_->trainer(), absl::Seconds(20));
    auto started = stream.Begin(client_->session_id(), "policy", absl::StrCat("vsilent-", round));
    EXPECT_TRUE(started.ok()) << started.status();
    const absl::Time t0 = absl::Now();
    v1::UpdateEvent e;
    bool result = false;
    while (!result && stream.Next(&e)) result = e.has_result();
    Injected got;
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    EXPECT_TRUE(result) << "no result before the stream's own deadline";
    EXPECT_EQ(e.result().code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
    EXPECT_THAT(e.result().message(), HasSubstr("the trainer sent no bucket for 3s"));
    EXPECT_LT(got.detection_s, 3 + 2.0) << "the bucket timeout is 3 s";
    got.detected_as =
        absl::StrCat("DEADLINE_EXCEEDED: ", e.result().message().substr(0, 90), "...");
    stream.CloseWrites();
    (void)stream.Finish();
    for (int i = 0; i < RealCluster::kEngines; ++i) {
      auto paused = cluster_->EnginePaused(i);
      EXPECT_TRUE(paused.ok() && !*paused) << "engine " << i << " got nothing: it serves again";
    }
    return got;
  });
}

// wsyncd killed (SIGKILL) and started again the same way, with no --state-dir: the default state
// directory ($XDG_STATE_HOME/wsync) brings the group back, the engines drop the engine group the
// dead wsyncd left, and the next update lands with no engine restart. Detection: from the kill to
// the new wsyncd's group ready again.
TEST_F(FaultMatrix, WsyncdKilledAndRestartedWithTheDefaultStateDir) {
  StartCluster();
  RunRounds(
      [&](int round) {
        const int killed = cluster_->daemon_pid();
        client_.reset();
        const absl::Time t0 = absl::Now();
        const absl::Status restarted = cluster_->RestartDaemon(SIGKILL);
        EXPECT_TRUE(restarted.ok()) << "round " << round << ": " << restarted << "\n"
                                    << cluster_->DaemonLog();
        absl::StatusOr<v1::GroupInfo> group = cluster_->Group();
        while (restarted.ok() && absl::Now() - t0 < absl::Seconds(15) &&
               !(group.ok() && group->state() == v1::GROUP_STATE_READY)) {
          absl::SleepFor(absl::Milliseconds(10));
          group = cluster_->Group();
        }
        Injected got;
        got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
        EXPECT_TRUE(group.ok() && group->state() == v1::GROUP_STATE_READY)
            << (group.ok() ? group->error() : std::string(group.status().message()));
        EXPECT_THAT(cluster_->DaemonLog(), HasSubstr("an earlier wsyncd left"));
        EXPECT_THAT(cluster_->DaemonLog(), HasSubstr("(the default: $XDG_STATE_HOME/wsync"));
        EXPECT_EQ(CountDirEntries("/dev/shm", absl::StrCat("wsync-", killed, "-")), 0)
            << "the dead wsyncd's slots are swept";
        got.detected_as = "the next wsyncd restored the group from its record and formed it again";
        return got;
      },
      kThreadChurn);
}

// Tensor names of 16 MiB, and one with a newline: refused. Before, each refusal quoted the name
// into the update history, the log and the answer (1 GB of RSS after 16 refusals, `wsyncctl
// updates` past the client's message limit, forged log lines).
TEST_F(FaultMatrix, HugeAndForgedTensorNames) {
  StartCluster();
  const int64_t rss_before = SampleResources(cluster_->daemon_pid()).rss_kib;
  const size_t log_before = cluster_->DaemonLog().size();
  RunRounds([&](int round) {
    Injected got;
    got.inputs = 0;
    got.detection_s = 0;
    for (int i = 0; i < 6; ++i) {
      // Twice the same 16 MiB name (refused as a duplicate, quoting it, before), or a newline.
      v1::Bucket bucket;
      bucket.set_slot(0);
      for (int k = 0; k < (i % 2 == 0 ? 2 : 1); ++k) {
        auto* t = bucket.add_tensors();
        t->set_name(i % 2 == 0 ? std::string(16 << 20, 'n')
                               : std::string("w\n2026-11-27T00:00:00.000 I forged line"));
        t->set_dtype("uint8");
        t->add_shape(8);
        t->set_offset(8 * k);
        t->set_length(8);
      }
      const absl::Time t0 = absl::Now();
      const absl::Status s = SendRawBucket(*client_, bucket);
      got.detection_s = std::max(got.detection_s, absl::ToDoubleSeconds(absl::Now() - t0));
      ++got.inputs;
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s.ToString().substr(0, 300);
      EXPECT_LT(s.message().size(), 1000u);
      got.detected_as = CodeAndMessage(s);
    }
    auto updates = cluster_->Updates();
    EXPECT_TRUE(updates.ok()) << "the history is readable: " << updates.status();
    return got;
  });
  const std::string log = cluster_->DaemonLog();
  EXPECT_LT(log.size() - log_before, 1u << 20) << "the log quotes names cut";
  EXPECT_EQ(log.find("\n2026-11-27T00:00:00.000 I forged"), std::string::npos)
      << "a forged log line";
  // ASan holds up to 256 MiB of freed memory in its quarantine before reusing it.
  EXPECT_LT(SampleResources(cluster_->daemon_pid()).rss_kib - rss_before,
            (128 + (kUnderAsan ? 256 : 0)) * 1024)
      << "9 refused buckets of 16 MiB names are not kept";
}

// Engine `url`'s row as `wsyncctl engines` reads it, timed.
struct EngineView {
  absl::Status listed;
  v1::EngineInfo engine;
  double seconds = 0;
};
EngineView ListEngine(RealCluster& cluster, const std::string& url) {
  EngineView view;
  v1::ListEnginesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const absl::Time t0 = absl::Now();
  grpc::Status g = cluster.admin().admin()->ListEngines(&ctx, v1::ListEnginesRequest(), &resp);
  view.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  view.listed = absl::Status(static_cast<absl::StatusCode>(g.error_code()), g.error_message());
  for (const v1::EngineInfo& e : resp.engines()) {
    if (e.url() == url) view.engine = e;
  }
  return view;
}

// An engine whose every answer turns into a chunked body without end: the operator's view of the
// engines (its health probe) reads at most the route's limit, names the route and the limit,
// and wsyncd stays up; the engine answering again, the next update goes through.
TEST_F(FaultMatrix, EngineAnswersWithoutEnd) {
  StartCluster();
  RunRounds([&](int) {
    EXPECT_TRUE(
        cluster_
            ->SetKnobs(1, {{"oversize_routes", nlohmann::json::array({"*"})}, {"oversize_mib", 0}})
            .ok());
    const EngineView view = ListEngine(*cluster_, cluster_->engine_url(1));
    EXPECT_TRUE(view.listed.ok()) << view.listed;
    EXPECT_FALSE(view.engine.healthy());
    EXPECT_THAT(view.engine.last_error(),
                HasSubstr(absl::StrCat("GET ", cluster_->engine_url(1),
                                       "/get_server_info: the answer's body is longer than 1 MiB, "
                                       "the most wsyncd reads from this route")));
    EXPECT_TRUE(cluster_->SetKnobs(1, {{"oversize_routes", nlohmann::json::array()}}).ok());
    Injected got;
    got.detection_s = view.seconds;
    got.detected_as = CodeAndMessage(absl::FailedPreconditionError(view.engine.last_error()));
    return got;
  });
}

// An engine that answers one byte every 3 s: each of its health probes ends at the request's
// deadline (2 s here, for the whole request, not per read), so `wsyncctl engines` answers,
// naming it unreachable.
TEST_F(FaultMatrix, EngineTricklesItsAnswers) {
  StartCluster({}, /*control_timeout_s=*/2);
  RunRounds([&](int) {
    EXPECT_TRUE(
        cluster_
            ->SetKnobs(1, {{"trickle_routes", nlohmann::json::array({"*"})}, {"trickle_ms", 3000}})
            .ok());
    const EngineView view = ListEngine(*cluster_, cluster_->engine_url(1));
    EXPECT_TRUE(view.listed.ok()) << view.listed;
    EXPECT_FALSE(view.engine.healthy());
    EXPECT_EQ(view.engine.last_error(), absl::StrCat("GET ", cluster_->engine_url(1),
                                                     "/get_server_info: engine unreachable"));
    EXPECT_LT(view.seconds, 2 + 3.0) << "the probe's deadline is 2 s for the whole request";
    EXPECT_TRUE(cluster_->SetKnobs(1, {{"trickle_routes", nlohmann::json::array()}}).ok());
    Injected got;
    got.detection_s = view.seconds;
    got.detected_as = CodeAndMessage(absl::UnavailableError(view.engine.last_error()));
    return got;
  });
}

// The store port engine `i` was last sent to (the simulator's group), 0 without a group.
int EngineStorePort(RealCluster& cluster, int i) {
  const std::string url = cluster.engine_url(i);
  httplib::Client http(url);
  auto res = http.Get("/sim/checksums");
  if (!res || res->status != 200) return 0;
  auto j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j.value("master_port", 0) : 0;
}

// A local process that watches the node's listening ports reaches a group's new store while the
// group forms, before an engine rank does (engine 0 is slowed at its init; engine 1's ranks are
// there already). It does what a torch client does when it connects (VALIDATE, PING, ADD
// "init/") three times over, as many as the group has engine ranks, then reads and waits for
// the NCCL id under every name it can work out: the group's, and the group's with wsyncd's
// incarnation, which wsyncd logs. None of it takes a rank's place or reads the id: the group
// forms and the update lands exactly.
TEST_F(FaultMatrix, StrangerRegistersInTheStoreBeforeARank) {
  StartCluster();
  const std::string log = cluster_->DaemonLog();
  const size_t at = log.find("incarnation ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string with_incarnation = "policy." + log.substr(at + 12, 8);
  RunRounds([&](int round) {
    const int old_port = StorePort(*cluster_);
    // A restarted engine makes the next update form the group again, on a new store.
    cluster_->StopEngine(0, SIGKILL);
    EXPECT_TRUE(cluster_->StartEngine(0).ok());
    EXPECT_TRUE(cluster_->SetKnobs(0, {{"init_delay_ms", 1000}}).ok());
    const absl::Time t0 = absl::Now();
    absl::Status pushed;
    std::thread push([&] {
      pushed = cluster_->PushAndVerify(*client_, absl::StrCat("vstranger-", round), SmallModel(8));
    });
    int port = 0;
    for (const absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
      port = EngineStorePort(*cluster_, 1);
      if (port != 0 && port != old_port) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_NE(port, old_port);
    std::vector<UniqueFd> strangers;
    int announced = 0, ids_read = 0;
    for (uint32_t pid = 4000; pid < 4003; ++pid) {
      auto fd =
          ConnectTcp("127.0.0.1", static_cast<uint16_t>(port), absl::Now() + absl::Seconds(5));
      if (!fd.ok()) continue;
      const absl::Time deadline = absl::Now() + absl::Seconds(5);
      const std::string hello = kValidate + "\x0d" +
                                std::string(reinterpret_cast<const char*>(&pid), 4) + "\x04" +
                                Str("init/") + U64(1);
      char reply[12];
      if (WriteAll(fd->get(), hello.data(), hello.size(), deadline).ok() &&
          ReadExact(fd->get(), reply, sizeof(reply), deadline).ok()) {
        ++announced;
      }
      for (const std::string& name : {std::string("policy"), with_incarnation}) {
        const std::string key = absl::StrCat("/", name, "/", name, "//cuda//0");
        const std::string get = "\x03" + Str(key);
        uint64_t n = 0;
        if (WriteAll(fd->get(), get.data(), get.size(), deadline).ok() &&
            ReadExact(fd->get(), &n, 8, deadline).ok() && n > 0) {
          ++ids_read;
        }
      }
      const std::string wait =
          "\x06" + U64(1) +
          Str(absl::StrCat("/", with_incarnation, "/", with_incarnation, "//cuda//0"));
      (void)WriteAll(fd->get(), wait.data(), wait.size(), deadline);
      strangers.push_back(std::move(*fd));
    }
    push.join();
    Injected got;
    got.inputs = static_cast<int>(strangers.size());
    got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
    EXPECT_EQ(announced, 3);
    EXPECT_EQ(ids_read, 0) << "a stranger read the NCCL id";
    EXPECT_TRUE(pushed.ok()) << pushed << cluster_->DaemonLog();
    got.detected_as = pushed.ok()
                          ? absl::StrCat(announced,
                                         " strangers registered before engine 0's rank and "
                                         "read no id; the group formed and the update landed")
                          : CodeAndMessage(pushed);
    return got;
  });
}

// A cluster whose wsyncd also serves TLS with tokens on `listen`; the files are `tls`.
struct TlsCluster {
  TlsFiles tls;
  std::string listen;
  ConnectOptions With(const std::string& token_file) const {
    ConnectOptions o;
    o.tls_ca_file = tls.cert;
    o.token_file = token_file;
    o.tls_server_name = "localhost";
    return o;
  }
  std::shared_ptr<grpc::Channel> StrangerChannel() const {
    grpc::SslCredentialsOptions ssl;
    std::ifstream ca(tls.cert);
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return OwnConnection(listen, grpc::SslCredentials(ssl), args);
  }
};

absl::StatusOr<TlsCluster> TlsClusterFiles() {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/wsync-faults-tls-", ::getpid());
  std::filesystem::create_directories(dir);
  auto tls = MakeTlsFiles(dir);
  if (!tls.ok()) return tls.status();
  return TlsCluster{*tls, absl::StrCat("127.0.0.1:", FreePort())};
}

std::vector<std::string> TlsFlags(const TlsCluster& c) {
  return {"--listen", c.listen,       "--tls-cert", c.tls.cert,           "--tls-key",
          c.tls.key,  "--token-file", c.tls.token,  "--admin-token-file", c.tls.admin_token};
}

// The health of wsyncd ("") asked on its socket.
std::string HealthOnTheSocket(const std::string& socket) {
  auto stub = grpc::health::v1::Health::NewStub(OwnConnection("unix:" + socket));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!s.ok()) return s.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

// Server reflection and update streams held open without a token on TCP, and more than a caller
// may hold on the unix socket (the update streams never send their begin). Each stream holds a
// server thread while it is open: without limits, 600 take all 512 and every call fails.
TEST_F(FaultMatrix, StreamFloodWithAndWithoutAToken) {
  auto tcp = TlsClusterFiles();
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  std::vector<std::string> flags = TlsFlags(*tcp);
  flags.insert(flags.end(), {"--stream-idle-timeout", "1"});
  StartCluster(flags);
  constexpr char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  constexpr char kUpdate[] = "/wsync.v1.Trainer/Update";
  RunRounds(
      [&](int round) {
        // The trainer of this round pushes over TCP, a caller of its own, while the socket floods.
        EXPECT_TRUE(client_->CloseSession().ok());
        client_.reset();
        auto tcp_trainer = Client::Connect(tcp->listen, tcp->With(tcp->tls.token));
        EXPECT_TRUE(tcp_trainer.ok()) << tcp_trainer.status();
        if (!tcp_trainer.ok()) return Injected{};
        EXPECT_TRUE((*tcp_trainer)->OpenSession(0, "TCP trainer").ok());
        std::vector<std::shared_ptr<grpc::Channel>> strangers, local, local_updates;
        for (int i = 0; i < 8; ++i) strangers.push_back(tcp->StrangerChannel());
        for (int i = 0; i < 8; ++i) local.push_back(OwnConnection("unix:" + cluster_->socket()));
        for (int i = 0; i < 2; ++i)
          local_updates.push_back(OwnConnection("unix:" + cluster_->socket()));
        const absl::Time t0 = absl::Now();
        StreamFlood tokenless(strangers, kReflection, 600, absl::Seconds(30));
        StreamFlood reflection(local, kReflection, 300, absl::Seconds(30));
        StreamFlood updates(local_updates, kUpdate, 100, absl::Seconds(30));
        EXPECT_EQ(tokenless.WaitEnded(absl::Seconds(5)), 600);
        reflection.WaitEnded(absl::Seconds(5), 300 - 64);
        // During the flood: an admin call and the health service on the socket, a push over TCP.
        EXPECT_TRUE(cluster_->DaemonUp()) << "health " << HealthOnTheSocket(cluster_->socket());
        EXPECT_EQ(HealthOnTheSocket(cluster_->socket()), "SERVING");
        const absl::Status pushed = cluster_->PushAndVerify(
            **tcp_trainer, absl::StrCat("vstreams-", round), SmallModel(40 + round));
        EXPECT_TRUE(pushed.ok()) << pushed;
        // Every stream ends: refused at once, or at the idle deadline.
        EXPECT_EQ(reflection.WaitEnded(absl::Seconds(10)), 300);
        EXPECT_EQ(updates.WaitEnded(absl::Seconds(10)), 100);
        Injected got;
        got.inputs = 1000;
        got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
        const int refused = reflection.Count(grpc::StatusCode::RESOURCE_EXHAUSTED) +
                            updates.Count(grpc::StatusCode::RESOURCE_EXHAUSTED);
        const int timed_out = reflection.Count(grpc::StatusCode::DEADLINE_EXCEEDED) +
                              updates.Count(grpc::StatusCode::DEADLINE_EXCEEDED);
        EXPECT_EQ(tokenless.Count(grpc::StatusCode::UNAUTHENTICATED), 600);
        EXPECT_EQ(refused + timed_out, 400);
        EXPECT_LE(timed_out, 64) << "the most one caller may hold";
        EXPECT_THAT(reflection.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED) +
                        updates.MessageOf(grpc::StatusCode::RESOURCE_EXHAUSTED),
                    HasSubstr("--max-streams-per-"));
        EXPECT_THAT(reflection.MessageOf(grpc::StatusCode::DEADLINE_EXCEEDED) +
                        updates.MessageOf(grpc::StatusCode::DEADLINE_EXCEEDED),
                    HasSubstr("(wsyncd --stream-idle-timeout)"));
        got.detected_as = absl::StrCat(
            "600 TCP streams without a token: UNAUTHENTICATED; of 400 on the socket, ", refused,
            " RESOURCE_EXHAUSTED (over a limit) and ", timed_out,
            " DEADLINE_EXCEEDED (no begin or request within 1 s); the last stream's end");
        EXPECT_TRUE((*tcp_trainer)->CloseSession().ok());
        return got;
      },
      kThreadChurn);
}

// GetStatus over a connection of its own to wsyncd's socket.
grpc::Status StatusOverANewConnection(const std::string& socket) {
  auto admin = v1::Admin::NewStub(OwnConnection("unix:" + socket));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  v1::DaemonStatus status;
  return admin->GetStatus(&ctx, v1::GetStatusRequest(), &status);
}

// A non-blocking connection to wsyncd's TCP port from `from` that sends nothing; returns the
// descriptor whether or not the handshake finished (a full backlog leaves it pending).
UniqueFd SilentConnection(const char* from, uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = ::inet_addr(from);
  (void)::bind(fd.get(), reinterpret_cast<sockaddr*>(&source), sizeof(source));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = ::inet_addr("127.0.0.1");
  (void)::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to));
  pollfd pfd{fd.get(), POLLOUT, 0};
  (void)::poll(&pfd, 1, 100);
  return fd;
}

// 1,100 TCP connections that never start TLS, against a wsyncd allowed 1,024 descriptors (as on
// the node where the flood took every descriptor and the unix socket stopped answering).
TEST_F(FaultMatrix, TcpConnectionFloodWithoutTls) {
  rlimit own{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &own), 0);
  if (own.rlim_max < 2048) GTEST_SKIP() << "needs 2048 descriptors for the flood";
  own.rlim_cur = own.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &own), 0);
  auto tcp = TlsClusterFiles();
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  std::vector<std::string> flags = TlsFlags(*tcp);
  flags.insert(flags.end(), {"--handshake-timeout", "1"});
  StartCluster(flags);
  const rlimit daemon_limit{1024, 1024};
  ASSERT_EQ(::prlimit(cluster_->daemon_pid(), RLIMIT_NOFILE, &daemon_limit, nullptr), 0);
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(tcp->listen.substr(tcp->listen.rfind(':') + 1), &port));
  RunRounds(
      [&](int) {
        const int fds_before = SampleResources(cluster_->daemon_pid()).fds;
        const absl::Time t0 = absl::Now();
        std::vector<UniqueFd> flood;
        for (int i = 0; i < 1100; ++i) flood.push_back(SilentConnection("127.0.0.2", port));
        // During the flood: wsyncd's descriptors stay bounded, its socket and a TLS trainer (from
        // another address) are served.
        absl::SleepFor(absl::Milliseconds(200));
        const int fds_during = SampleResources(cluster_->daemon_pid()).fds;
        EXPECT_LE(fds_during, fds_before + TcpListener::kMaxConnectionsPerAddress + 16);
        const grpc::Status on_socket = StatusOverANewConnection(cluster_->socket());
        EXPECT_TRUE(on_socket.ok())
            << "the unix socket stopped answering: " << on_socket.error_message();
        auto tcp_trainer = Client::Connect(tcp->listen, tcp->With(tcp->tls.token));
        EXPECT_TRUE(tcp_trainer.ok()) << tcp_trainer.status();
        if (tcp_trainer.ok()) {
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
          v1::ListGroupsResponse groups;
          const grpc::Status listed =
              (*tcp_trainer)->admin()->ListGroups(&ctx, v1::ListGroupsRequest(), &groups);
          EXPECT_TRUE(listed.ok()) << listed.error_message();
        }
        // Every connection is closed by wsyncd: past the limit at once, the rest at the handshake
        // timeout.
        int closed = 0;
        const absl::Time deadline = absl::Now() + absl::Seconds(3);
        for (UniqueFd& fd : flood) {
          const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
          closed += ClosedByPeer(fd.get(), left) ? 1 : 0;
        }
        Injected got;
        got.inputs = 1100;
        got.detection_s = absl::ToDoubleSeconds(absl::Now() - t0);
        EXPECT_EQ(closed, 1100);
        got.detected_as = absl::StrCat(
            closed, " of 1100 closed by wsyncd (at most ", TcpListener::kMaxConnectionsPerAddress,
            " kept from one address, until the 1 s handshake timeout); descriptors ", fds_before,
            " -> ", fds_during, " during the flood (limit 1024); the last close");
        return got;
      },
      // The handshakes and their timeouts run on gRPC's timer and event-engine threads,
      // which grow under the flood and keep their stacks: library churn, not wsyncd's.
      kThreadChurn);
}

std::string Seconds(double s) {
  if (s < 0) return "-";
  return s < 1 ? absl::StrFormat("%.1f ms", s * 1000) : absl::StrFormat("%.2f s", s);
}

class TablePrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::string table = absl::StrCat(
        "Each fault injected ", kFaultRounds, " times, each time followed by an update.\n\n",
        "| fault | inputs | detection | detected as | wsyncd up | next update | leaks |\n",
        "|---|---|---|---|---|---|---|\n");
    int survived = 0, inputs = 0, leaking = 0;
    for (const FaultRow& r : FaultRows()) {
      const bool ok = r.daemon_up && r.next_update_ok && r.leaks == "none";
      survived += ok ? 1 : 0;
      inputs += r.inputs;
      leaking += r.leaks == "none" ? 0 : 1;
      std::string detected = r.detected_as;
      absl::StrReplaceAll({{"|", "\\|"}, {"\n", " "}}, &detected);
      table += absl::StrFormat("| %s | %d | %s | %s | %s | %s | %s |\n", r.fault, r.inputs,
                               Seconds(r.detection_s), detected, r.daemon_up ? "yes" : "NO",
                               r.next_update_ok ? "ok" : "FAILED", r.leaks);
    }
    table += absl::StrFormat(
        "\n%d of %d faults survived (wsyncd up, next update ok, no leak); "
        "%d inputs tried; %d leaking\n",
        survived, FaultRows().size(), inputs, leaking);
    std::printf("\n%s", table.c_str());
    if (const char* path = std::getenv("WSYNC_FAULT_TABLE")) std::ofstream(path) << table;
  }
};

const auto* const kPrinter = ::testing::AddGlobalTestEnvironment(new TablePrinter);

}  // namespace
}  // namespace wsync
