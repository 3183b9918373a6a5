// The trainer and admin services end to end in one process: client -> in-process gRPC -> daemon
// core -> host collective + HTTP -> SGLang simulators.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/host/shm_slot.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "gmock/gmock.h"
#include "tests/service/service_fixture.h"
#include "tests/sim/sim_http_server.h"
#include "tests/sim/tcp_store_client.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST_F(ServiceFixture, ThreeVersionsReachEveryRankByteForByte) {
  CreatePolicyGroup();
  for (uint32_t v = 1; v <= 3; ++v) {
    auto model = SmallModel(v);
    std::vector<PushProgress> progress;
    auto result = client_->Push("policy", absl::StrCat("v", v), Refs(model),
                                [&](const PushProgress& p) { progress.push_back(p); });
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->buckets, 3u);
    EXPECT_EQ(progress.size(), result->buckets);
    EXPECT_EQ(progress.back().bytes_done, progress.back().bytes_total);
    ASSERT_EQ(result->engines.size(), 2u);
    for (const auto& e : result->engines) EXPECT_TRUE(e.status.ok()) << e.engine;
    ExpectHolds(*sim_a_.sim, model, absl::StrCat("v", v), 1);
    ExpectHolds(*sim_b_.sim, model, absl::StrCat("v", v), 2);
  }
  EXPECT_EQ(GetGroup("policy").last_version(), "v3");
  auto updates = Updates();
  ASSERT_EQ(updates.size(), 3u);
  for (const auto& u : updates) EXPECT_EQ(u.state(), "committed");
}

struct BadBucket {
  std::string label;
  v1::Bucket bucket;
  absl::StatusCode code;
  std::string message;
  bool commit_first = false;
};

TEST_F(ServiceFixture, BadBucketsAreRefusedBeforeAnyByteReachesAnEngine) {
  CreatePolicyGroup();
  MappedSlot& slot = *client_->slot(0);
  std::vector<uint8_t> pattern(4096, 0xab);
  ASSERT_TRUE(slot.CopyIn(0, pattern.data(), pattern.size()).ok());
  const uint32_t crc = *slot.Checksum(64);
  auto bucket = [&](std::vector<v1::TensorSpec> specs, uint32_t slot_index = 0,
                    uint32_t checksum = 0) {
    v1::Bucket b;
    b.set_slot(slot_index);
    b.set_checksum(checksum);
    for (auto& s : specs) *b.add_tensors() = s;
    return b;
  };
  const auto checked_by = [](v1::Bucket b, const std::string& algorithm) {
    b.set_checksum_algorithm(algorithm);
    return b;
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const auto kPrecondition = absl::StatusCode::kFailedPrecondition;
  std::vector<BadBucket> cases = {
      {"overlap", bucket({Spec("a", "float32", {8}, 0, 32), Spec("b", "float32", {8}, 16, 32)}),
       kInvalid, "overlap"},
      {"outside the slot", bucket({Spec("a", "uint8", {16}, kSlotBytes - 8, 16)}), kInvalid,
       "outside the slot"},
      {"unknown dtype", bucket({Spec("a", "complex32", {4}, 0, 16)}), kInvalid,
       "unknown dtype 'complex32'"},
      {"shape x itemsize", bucket({Spec("a", "bfloat16", {5}, 0, 16)}), kInvalid, "!= length 16"},
      {"duplicate names", bucket({Spec("a", "uint8", {4}, 0, 4), Spec("a", "uint8", {4}, 4, 4)}),
       kInvalid, "duplicate tensor name 'a'"},
      {"empty bucket", bucket({}), kInvalid, "empty bucket"},
      {"gap in the flattened layout",
       bucket({Spec("a", "uint8", {4}, 0, 4), Spec("b", "uint8", {4}, 8, 4)}), kInvalid,
       "must lie back to back"},
      {"slot not held", bucket({Spec("a", "uint8", {64}, 0, 64)}, 7, crc), kPrecondition,
       "slot 7 is not held by session"},
      {"checksum mismatch", bucket({Spec("a", "uint8", {64}, 0, 64)}, 0, crc ^ 1),
       absl::StatusCode::kDataLoss, "checksum mismatch"},
      {"bucket after commit", bucket({Spec("a", "uint8", {64}, 0, 64)}, 0, crc), kPrecondition,
       "arrived after commit", true},
      // 64 bytes are one window, so the sampled value is the full one: refused for its kind.
      {"sampled checksum where bytes cross a wire",
       checked_by(bucket({Spec("a", "uint8", {64}, 0, 64)}, 0, crc), "crc32-sampled"), kInvalid,
       "carries a crc32-sampled checksum, but this update asks every bucket for crc32"},
      {"unknown checksum algorithm",
       checked_by(bucket({Spec("a", "uint8", {64}, 0, 64)}, 0, crc), "md5"), kInvalid,
       "checksum_algorithm \"md5\" is none of \"crc32\", \"crc32-sampled\""},
  };
  for (const BadBucket& c : cases) {
    const int before = TotalUpdatesReceived();
    absl::Status s = SendRawBucket(*client_, c.bucket, c.commit_first);
    EXPECT_EQ(s.code(), c.code) << c.label << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.label;
    EXPECT_EQ(TotalUpdatesReceived(), before) << c.label << ": bytes reached an engine";
    EXPECT_EQ(GetGroup("policy").state(), v1::GROUP_STATE_READY) << c.label;
  }
  // The daemon keeps serving: a good update still goes through.
  auto model = SmallModel(9);
  auto result = client_->Push("policy", "v9", Refs(model));
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectHolds(*sim_b_.sim, model, "v9", 2);
  for (const auto& u : Updates()) {
    if (u.version() == "bad") {
      EXPECT_NE(u.state(), "committed");
    }
  }
}

// A trainer that fills its slot, then truncates the slot's shared memory before announcing the
// bucket. wsyncd reads the slot under a fault guard for its checksum (with checksums off, it checks
// the slot's size before the broadcast would read it): the update fails with DATA_LOSS naming the
// slot and session, nothing reaches an engine, wsyncd grows the slot back and stays up.
class TruncatedSlotTest : public ServiceFixture, public ::testing::WithParamInterface<std::string> {
 protected:
  void Configure(DaemonOptions& options) override { options.checksum = GetParam(); }
};

TEST_P(TruncatedSlotTest, ATrainerThatTruncatesItsSlotFailsItsUpdateAndTheNextOneWorks) {
  CreatePolicyGroup();
  const auto first = SmallModel(1);
  PushAndExpectHeld("v1", first);
  // The trainer's own session, as the wire shows it: the reply names each slot's shared memory.
  ASSERT_TRUE(client_->CloseSession().ok());
  v1::OpenSessionRequest open;
  open.set_device(0);
  open.set_client_name("truncating trainer");
  v1::OpenSessionResponse session;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(client_->trainer()->OpenSession(&ctx, open, &session).ok());
  }
  const v1::SlotInfo& info = session.slots(0);
  const std::vector<uint8_t> bytes(64, 0x5a);
  {
    auto slot = ShmMappedSlot::Open(info.memory_handle(), info.bytes());
    ASSERT_TRUE(slot.ok()) << slot.status();
    ASSERT_TRUE((*slot)->CopyIn(0, bytes.data(), bytes.size()).ok());
  }
  const int fd = ::shm_open(info.memory_handle().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::close(fd);
  v1::Bucket bucket;
  bucket.set_slot(0);
  bucket.set_checksum(Crc32(bytes.data(), bytes.size()));
  // 64 bytes are one window: the sampled checksum is the full one, read through its own path.
  if (GetParam() == "crc32-sampled") bucket.set_checksum_algorithm("crc32-sampled");
  *bucket.add_tensors() = Spec("a", "uint8", {64}, 0, 64);
  const int received = TotalUpdatesReceived();
  const size_t broadcasts = broadcasts_.records().size();

  absl::Status s = SendRawBucketAs(client_->trainer(), session.session_id(), bucket);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("slot 0 of session ", session.session_id())));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(
                               info.memory_handle(), " shrank under wsyncd to 0 of ",
                               info.allocation_bytes(), " bytes (the trainer truncated it)")));
  EXPECT_THAT(s.message(), HasSubstr("nothing was sent"));
  EXPECT_EQ(TotalUpdatesReceived(), received) << "bytes of the bad bucket reached an engine";
  EXPECT_EQ(broadcasts_.records().size(), broadcasts) << "the bad bucket was handed to the wire";
  ExpectHolds(*sim_a_.sim, first, "v1", 1);
  ExpectHolds(*sim_b_.sim, first, "v1", 2);

  // wsyncd is up; the next trainer's session gets the same slots, grown back, and updates.
  {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest close;
    close.set_session_id(session.session_id());
    v1::CloseSessionResponse closed;
    ASSERT_TRUE(client_->trainer()->CloseSession(&ctx, close, &closed).ok());
  }
  ASSERT_TRUE(client_->OpenSession(0, "next trainer").ok());
  PushAndExpectHeld("v2", SmallModel(2));
}

INSTANTIATE_TEST_SUITE_P(Checksums, TruncatedSlotTest,
                         ::testing::Values("crc32", "crc32-sampled", "none"));

TEST_F(ServiceFixture, UnknownGroupAndSecondSessionAreRefused) {
  CreatePolicyGroup();
  auto result = client_->Push("nope", "v1", Refs(SmallModel(1)));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("unknown group 'nope'"));
  auto other = Client::FromChannel(server_->InProcessChannel());
  absl::Status s = other->OpenSession(0, "second trainer");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("held by session"));
  EXPECT_TRUE(other->OpenSession(1, "trainer on device 1").ok());
}

TEST_F(ServiceFixture, MalformedTensorIsRefusedBeforeAnythingIsSent) {
  CreatePolicyGroup();
  std::vector<uint8_t> data(64);
  std::vector<TensorRef> refs = {{"small", DType::kUint8, {4}, data.data(), 4},
                                 {"bad", DType::kBfloat16, {3}, data.data(), 7}};
  auto result = client_->Push("policy", "v1", refs);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("'bad': 3 elements"));
  EXPECT_EQ(TotalUpdatesReceived(), 0);
  EXPECT_TRUE(Updates().empty());
}

TEST_F(ServiceFixture, TrainerDisconnectAbortsTheUpdateAndFreesItsSlots) {
  CreatePolicyGroup();
  {
    UpdateStream stream(client_->trainer(), absl::Seconds(30));
    ASSERT_TRUE(stream.Begin(client_->session_id(), "policy", "half").ok());
    std::vector<uint8_t> bytes(1000, 3);
    ASSERT_TRUE(client_->slot(0)->CopyIn(0, bytes.data(), bytes.size()).ok());
    v1::Bucket b;
    b.set_slot(0);
    b.set_checksum(Crc32(bytes.data(), bytes.size()));
    *b.add_tensors() = Spec("w", "uint8", {1000}, 0, 1000);
    ASSERT_TRUE(stream.SendBucket(b));
    v1::UpdateEvent e;
    bool done = false;
    while (!done && stream.Next(&e)) done = e.has_bucket_done();
    ASSERT_TRUE(done);
    // Timing's words, and the deprecated fields older clients read, carry the same figures.
    const v1::BucketDone& bucket_done = e.bucket_done();
    ASSERT_TRUE(bucket_done.has_timing());
    EXPECT_EQ(bucket_done.verify_seconds(), bucket_done.timing().verify_seconds());
    EXPECT_EQ(bucket_done.idle_before_seconds(), bucket_done.timing().idle_seconds());
    EXPECT_EQ(bucket_done.broadcast_seconds(), bucket_done.timing().wire_seconds());
    EXPECT_GT(bucket_done.timing().wire_seconds(), 0) << "host mode broadcasts the bucket";
    // Occupy the other slot too, then vanish like a crashed trainer.
    ASSERT_TRUE(client_->slot(1)->CopyIn(0, bytes.data(), bytes.size()).ok());
    b.set_slot(1);
    *b.mutable_tensors(0) = Spec("w2", "uint8", {1000}, 0, 1000);
    stream.SendBucket(b);
    stream.Cancel();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string state;
  while (absl::Now() < deadline) {
    auto updates = Updates();
    state = updates.empty() ? "" : updates.back().state();
    if (state == "aborted") break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(state, "aborted");
  EXPECT_THAT(Updates().back().message(), HasSubstr("trainer disconnected"));
  v1::ListBuffersResponse buffers;
  grpc::ClientContext ctx;
  ASSERT_TRUE(client_->admin()->ListBuffers(&ctx, v1::ListBuffersRequest(), &buffers).ok());
  for (const auto& b : buffers.buffers()) EXPECT_EQ(b.state(), "filling") << b.index();
  auto model = SmallModel(2);
  auto result = client_->Push("policy", "after-disconnect", Refs(model));
  ASSERT_TRUE(result.ok()) << result.status();
  // The aborted update's first bucket did land (a bucket is all or nothing; an update is not).
  ExpectHolds(*sim_a_.sim, model, "after-disconnect", 1, /*only_these=*/false);
}

TEST_F(ServiceFixture, TimingGivesTheFirstLaunchAndCommitAndNoIdleFromBeforeTheUpdate) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  absl::SleepFor(absl::Milliseconds(300));
  auto result = client_->Push("policy", "v2", Refs(SmallModel(2)));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(result->buckets, 3u);
  // The 300 ms since the last update's broadcast is no gap between this update's buckets.
  EXPECT_LT(result->idle_before_seconds, 0.25);
  // The deprecated names carry what Timing's words do.
  EXPECT_EQ(result->idle_before_seconds, result->idle_seconds);
  EXPECT_EQ(result->broadcast_seconds, result->wire_seconds);
  EXPECT_GT(result->first_launch_seconds, 0);
  EXPECT_LT(result->first_launch_seconds, result->seconds);
  EXPECT_GT(result->finish_seconds, 0);
  EXPECT_LT(result->finish_seconds, result->seconds);
}

TEST_F(ServiceFixture, EngineAnswering500FailsTheUpdateNamingItThenTheGroupReforms) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  // The next update request sim b receives answers HTTP 500.
  SetKnobs(sim_b_, absl::StrCat("{\"fail_update_at\": ", sim_b_.sim->updates_received(), "}"));
  const absl::Time t0 = absl::Now();
  auto failed = client_->Push("policy", "v2", Refs(SmallModel(2)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3)) << "a 500 must not wait for the bucket deadline";
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr(absl::StrCat("engine ", sim_b_.url)));
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("HTTP 500"));
  // The engine's own answer stays in the daemon's log.
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::Not(HasSubstr("Internal Server Error")));
  EXPECT_EQ(GetGroup("policy").state(), v1::GROUP_STATE_BROKEN);
  EXPECT_EQ(Updates().back().state(), "failed");
  PushAndExpectHeld("v3", SmallModel(3));
}

TEST_F(ServiceFixture, AGroupThatCannotFormAgainIsShownBesideItsHealthyEnginesWithTheReason) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  SetKnobs(sim_b_, absl::StrCat("{\"fail_update_at\": ", sim_b_.sim->updates_received(), "}"));
  ASSERT_FALSE(client_->Push("policy", "v2", Refs(SmallModel(2))).ok());
  // The group forms again before the next update, and engine b now refuses to join.
  SetKnobs(sim_b_, R"({"fail_init": true})");
  auto refused = client_->Push("policy", "v3", Refs(SmallModel(3)));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the engine says: Failed to init group: simulated"));
  auto engines = [&] {
    v1::ListEnginesResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(client_->admin()->ListEngines(&ctx, v1::ListEnginesRequest(), &resp).ok());
    return resp;
  };
  v1::ListEnginesResponse broken = engines();
  ASSERT_EQ(broken.engines_size(), 2);
  for (const v1::EngineInfo& e : broken.engines()) {
    EXPECT_TRUE(e.healthy()) << e.url();
    EXPECT_THAT(e.group_error(), HasSubstr(sim_b_.url)) << e.url();
    EXPECT_THAT(e.group_error(), HasSubstr("Failed to init group: simulated")) << e.url();
  }
  SetKnobs(sim_b_, R"({"fail_init": false})");
  PushAndExpectHeld("v4", SmallModel(4));
  const v1::ListEnginesResponse formed = engines();
  for (const v1::EngineInfo& e : formed.engines()) EXPECT_EQ(e.group_error(), "") << e.url();
}

TEST_F(ServiceFixture, HungEngineFailsTheUpdateAtTheBucketDeadlineAndCanBeReplaced) {
  CreatePolicyGroup();
  SetKnobs(sim_a_, R"({"hang_update_at": 0})");
  const absl::Time t0 = absl::Now();
  auto failed = client_->Push("policy", "v1", Refs(SmallModel(1)));
  const absl::Duration took = absl::Now() - t0;
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDeadlineExceeded) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(sim_a_.url));
  EXPECT_GE(took, absl::Seconds(2.5));
  EXPECT_LT(took, absl::Seconds(15));
  // Replace the hung engine: a new server, a new group.
  sim_a_.sim->Stop();
  RunningSim replacement = StartSim(1, {});
  grpc::ClientContext ctx;
  v1::DestroyGroupRequest destroy;
  destroy.set_name("policy");
  v1::DestroyGroupResponse ignored;
  ASSERT_TRUE(client_->admin()->DestroyGroup(&ctx, destroy, &ignored).ok());
  v1::GroupInfo info;
  ASSERT_TRUE(CreateGroup("policy", {replacement.url, sim_b_.url}, {1, 2}, &info).ok());
  auto model = SmallModel(2);
  ASSERT_TRUE(client_->Push("policy", "v2", Refs(model)).ok());
  ExpectHolds(*replacement.sim, model, "v2", 1);
  ExpectHolds(*sim_b_.sim, model, "v2", 2);
}

TEST_F(ServiceFixture, EngineThatNeverFetchesTheIdIsNamedByTheStoreWithinTheDeadline) {
  // The device_id hazard: the engine's ranks join the store but build the group without ever
  // reading the NCCL id, so rank 0 waits alone until the bucket deadline.
  SetKnobs(sim_a_, R"({"never_fetch_id": true})");
  v1::GroupInfo info;
  ASSERT_TRUE(CreateGroup("solo", {sim_a_.url}, {1}, &info).ok());
  const absl::Time t0 = absl::Now();
  auto failed = client_->Push("solo", "v1", Refs(SmallModel(1)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDeadlineExceeded) << failed.status();
  const std::string message(failed.status().message());
  EXPECT_THAT(message, HasSubstr("1 of 1 engine ranks connected"));
  EXPECT_THAT(message, HasSubstr("0 fetched the NCCL id /solo/solo//cuda//0"));
  // Each rank is its own process and PINGs the store with its pid, as torch's client does.
  httplib::Client http(sim_a_.url);
  auto pids_answer = http.Get("/sim/pids");
  ASSERT_TRUE(pids_answer && pids_answer->status == 200);
  const nlohmann::json pids = nlohmann::json::parse(pids_answer->body)["ranks"];
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_THAT(message, HasSubstr(absl::StrCat("pids ", pids[0].get<int>(),
                                              " joined the store but never "
                                              "fetched the id")));
  EXPECT_THAT(message, HasSubstr("device_id"));
}

TEST_F(ServiceFixture, AnEngineRestartIsSeenThoughAnotherStoreClientStaysConnected) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  // An idle client of the group's store (a probe, a stray process): counting connections would
  // take it for the engine rank that leaves below.
  const std::string rendezvous = GetGroup("policy").rendezvous();
  int store_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(rendezvous.substr(rendezvous.rfind(':') + 1), &store_port));
  auto idle = TcpStoreClient::Connect("127.0.0.1", static_cast<uint16_t>(store_port), 4242,
                                      absl::Now() + absl::Seconds(5), /*register_init=*/false);
  ASSERT_TRUE(idle.ok()) << idle.status();
  // Engine a restarts at the same address; the new process does not hold the group.
  int engine_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(sim_a_.url.substr(sim_a_.url.rfind(':') + 1), &engine_port));
  sim_a_.sim.reset();  // the process ends: its ranks' store connections close
  sim_a_ = StartSim(1, {}, engine_port);
  ASSERT_NE(sim_a_.sim, nullptr);
  auto model = SmallModel(2);
  auto pushed = client_->Push("policy", "v2", Refs(model));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ExpectHolds(*sim_a_.sim, model, "v2", 1);
  ExpectHolds(*sim_b_.sim, model, "v2", 2);
}

TEST_F(ServiceFixture, GroupFormationFailureNamesTheEngine) {
  RunningSim refusing = StartSim(1, {"--fail-init"});
  v1::GroupInfo info;
  grpc::Status s = CreateGroup("g", {sim_a_.url, refusing.url}, {1, 1}, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr(refusing.url));
  EXPECT_THAT(s.error_message(), HasSubstr("success=false"));
  // It answered its probe as an SGLang server does: its reason is carried.
  EXPECT_THAT(s.error_message(),
              HasSubstr("the engine refused the request; the engine says: Failed to init group: "
                        "simulated"));
  s = CreateGroup("g2", {"http://127.0.0.1:1"}, {1}, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(),
              HasSubstr("http://127.0.0.1:1/get_server_info: engine unreachable"));
  s = CreateGroup("g3", {sim_b_.url}, {1}, &info);  // sim b runs tp 2
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("tp_size 2 but the group declares 1"));
  // The engine that did join was told to drop the group again, so it can join a new one.
  CreatePolicyGroup();
}

TEST_F(ServiceFixture, AdminViewsAndDrain) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  v1::DaemonStatus status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(client_->admin()->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok());
  }
  EXPECT_EQ(status.mode(), "host");
  EXPECT_EQ(status.sessions(), 1u);
  EXPECT_EQ(status.groups(), 1u);
  EXPECT_EQ(status.slots(), 2u);
  EXPECT_EQ(status.updates_committed(), 1u);
  EXPECT_GT(status.bytes_sent(), 2u << 20);
  v1::ListEnginesResponse engines;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(client_->admin()->ListEngines(&ctx, v1::ListEnginesRequest(), &engines).ok());
  }
  ASSERT_EQ(engines.engines_size(), 2);
  EXPECT_TRUE(engines.engines(1).healthy());
  EXPECT_EQ(engines.engines(1).weight_version(), "v1");
  EXPECT_EQ(engines.engines(1).rank_offset(), 2u);
  v1::DrainResponse drained;
  {
    grpc::ClientContext ctx;
    v1::DrainRequest req;
    req.set_timeout_seconds(5);
    ASSERT_TRUE(client_->admin()->Drain(&ctx, req, &drained).ok());
  }
  EXPECT_TRUE(drained.drained());
  auto refused = client_->Push("policy", "v2", Refs(SmallModel(2)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("draining"));
  // A drain can be undone, and the daemon serves as before.
  v1::UndrainResponse undrained;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(client_->admin()->Undrain(&ctx, v1::UndrainRequest(), &undrained).ok());
  }
  EXPECT_TRUE(undrained.was_draining());
  PushAndExpectHeld("v3", SmallModel(3));
}

// Engines may be at 127.0.0.1 only.
class NarrowEngineNetworks : public ServiceFixture {
 protected:
  void Configure(DaemonOptions& options) override {
    options.engine_networks = *NetworkAllowList::Parse({"127.0.0.1"});
  }
};

TEST_F(NarrowEngineNetworks, AGroupElsewhereIsRefusedBeforeAnyRequestIsMade) {
  // A service on another loopback address: outside the list, and counting what reaches it.
  std::atomic<int> requests{0};
  SimHttpServer elsewhere;
  elsewhere.Get("/get_server_info", [&](const SimHttpRequest&, SimHttpResponse& res) {
    ++requests;
    res.set_content(R"({"tp_size": 1})", "application/json");
  });
  auto port = elsewhere.Start("127.0.0.2", 0);
  if (!port.ok()) GTEST_SKIP() << "cannot listen on 127.0.0.2: " << port.status();
  const std::string url = absl::StrCat("http://127.0.0.2:", *port);
  v1::GroupInfo info;
  grpc::Status s = CreateGroup("elsewhere", {url}, {1}, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), absl::StrCat("group 'elsewhere': engine ", url,
                                            " is not allowed by engine_networks: 127.0.0.2 is "
                                            "not in 127.0.0.1"));
  // The config's path (DeclareGroup) is refused alike, and nothing was asked of the service.
  GroupSpec spec;
  spec.name = "declared";
  spec.engines = {{url, 1}};
  spec.kind = "sglang";
  spec.transport = "broadcast";
  spec.engine_options = std::make_shared<const SglangOptions>();
  EXPECT_EQ(core_->DeclareGroup(spec).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(requests.load(), 0);
  EXPECT_EQ(core_->ListGroups().size(), 0u);
  // An engine inside the list forms as before.
  ASSERT_TRUE(CreateGroup("inside", {sim_a_.url}, {1}, &info).ok());
}

// A trainer that keeps pushing buckets but never reads its stream: the daemon's events fill the
// stream's flow-control window. They must not block the update's pipeline (its buckets settle),
// so the idle deadline ends the update and the engines are not held paused for as long as the
// connection lives.
class StopsReadingTest : public ServiceFixture {
 protected:
  void Configure(DaemonOptions& options) override {
    options.bucket_timeout = absl::Seconds(1);
    options.slot_bytes = 4096;
    options.slots_per_device = 4;
  }
};

TEST_F(StopsReadingTest, ATrainerThatStopsReadingDoesNotHoldTheEnginesPastTheBucketTimeout) {
  CreatePolicyGroup();
  ServerOptions tcp;
  tcp.tcp_listen = "127.0.0.1:0";
  tcp.insecure_listen = true;
  auto server = DaemonServer::Start(core_.get(), tcp);
  ASSERT_TRUE(server.ok()) << server.status();
  // A hostile client announces a small receive window (its own channel's arguments).
  grpc::ChannelArguments args;
  args.SetInt("grpc.http2.bdp_probe", 0);
  args.SetInt("grpc.http2.lookahead_bytes", 1024);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", (*server)->tcp_port()),
                                           grpc::InsecureChannelCredentials(), args);
  auto client = Client::FromChannel(channel);
  ASSERT_TRUE(client_->CloseSession().ok());
  {
    absl::Status opened = client->OpenSession(0, "never reads");
    ASSERT_TRUE(opened.ok()) << opened;
  }
  UpdateStream stream(client->trainer(), absl::Seconds(120));
  ASSERT_TRUE(stream.Begin(client->session_id(), "policy", "vX").ok());
  const auto done = [&]() -> uint64_t {
    for (const UpdateProgressView& p : core_->ListProgress()) return p.buckets_done;
    return 0;
  };
  uint64_t sent = 0;
  for (int k = 0; k < 20000; ++k) {  // bounded; stops once the daemon stalls
    MappedSlot& slot = *client->slot(k % 2);
    std::vector<uint8_t> bytes(64, static_cast<uint8_t>(k));
    ASSERT_TRUE(slot.CopyIn(0, bytes.data(), bytes.size()).ok());
    v1::Bucket b;
    b.set_slot(k % 2);
    b.set_sequence(k);
    b.set_checksum(*slot.Checksum(64));
    *b.add_tensors() = Spec(absl::StrCat("t", k), "uint8", {64}, 0, 64);
    if (!stream.SendBucket(b)) break;  // wsyncd cancelled the call
    ++sent;
    // Waits for the daemon to have answered it (so the slot is free again), 2 s at most.
    const absl::Time until = absl::Now() + absl::Seconds(2);
    while (done() < sent && absl::Now() < until) absl::SleepFor(absl::Microseconds(200));
    if (done() < sent) break;  // stalled
  }
  const uint64_t stalled_at = done();
  // Now the trainer is silent too: within 5 bucket timeouts the update must have ended.
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (!core_->ListProgress().empty() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const bool running = !core_->ListProgress().empty();
  const bool paused = sim_a_.sim->Checksums()["paused"].get<bool>();
  EXPECT_FALSE(running) << "update still running 5 s after the trainer went silent (bucket "
                        << "timeout 1 s); buckets done " << stalled_at << " of " << sent
                        << " sent; engine a paused: " << paused;
  stream.Cancel();
  v1::UpdateEvent e;
  for (int i = 0; i < 100000 && stream.Next(&e); ++i) {
  }
  (void)stream.Finish();
  (*server)->Shutdown(absl::Seconds(1));
}

}  // namespace
}  // namespace wsync
