// The core alone, with a fake engine adapter and a fake transport: the group's state machine and
// lifecycle fan-out, the update pipeline's slot reuse as the transport reports it, buckets with
// several sources, bucket rules and capabilities. This binary links no transport, engine or
// service library (tests/CMakeLists.txt), which is what keeps the core free of them.
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/host/host_platform.h"
#include "daemon/core/daemon_core.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/weight_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_adapter.h"
#include "tests/fakes/fake_transport.h"

namespace wsync {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kSlotBytes = 4096;

std::string Pattern(uint64_t bytes, int seed) {
  std::string out(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) out[i] = static_cast<char>((i * 31 + seed * 7) & 0xFF);
  return out;
}

BucketManifest OneTensor(const std::string& name, uint64_t bytes, DType dtype = DType::kUint8) {
  BucketManifest m;
  m.tensors.push_back(
      TensorEntry{name, dtype, {static_cast<int64_t>(bytes / DTypeSize(dtype))}, 0, bytes});
  return m;
}

class FakeGroupTest : public ::testing::Test {
 protected:
  std::shared_ptr<WeightGroup> MakeGroup(FakeCapabilities caps = FakeCapabilities(),
                                         FakeTransportOptions options = {}) {
    auto group =
        WeightGroup::Create(FakeGroupSpec("policy", {"http://a:1", "http://b:2"}), &platform_,
                            GroupOptions{}, FakeGroupFactories(cluster_, caps, options, log_));
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *group : nullptr;
  }
  std::unique_ptr<SlotMemory> Slot(int device, const std::string& bytes) {
    auto slot = platform_.AllocateSlot(device, kSlotBytes);
    EXPECT_TRUE(slot.ok()) << slot.status();
    std::memcpy((*slot)->data(), bytes.data(), bytes.size());
    return std::move(*slot);
  }
  FakeEngine& engine(const std::string& url) { return *cluster_->Engine(url); }
  // Sends one 64-byte bucket of update `update` (version `version`) and waits for every answer.
  void SendAnsweredBucket(WeightGroup& group, const std::string& update, const std::string& version,
                          bool last) {
    auto slot = Slot(0, Pattern(64, 5));
    auto handle =
        group.StartBucket({BucketSource{0, slot.get(), nullptr}}, OneTensor("w0", 64),
                          BucketContext{update, version, 0, last}, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(handle.ok()) << handle.status();
    std::vector<EngineOutcome> answers;
    ASSERT_TRUE((*handle)->WaitAnswered(&answers).ok());
  }

  HostPlatform platform_{"127.0.0.1", "127.0.0.1"};
  std::shared_ptr<FakeCluster> cluster_ = std::make_shared<FakeCluster>();
  std::shared_ptr<FakeTransportLog> log_ = std::make_shared<FakeTransportLog>();
};

TEST_F(FakeGroupTest, AFullUpdateRunsEveryEnginesLifecycleInOrder) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  EXPECT_EQ(group->Snapshot().state, GroupState::kReady);
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  const std::string a = Pattern(1000, 1), b = Pattern(500, 2);
  auto slot_a = Slot(0, a), slot_b = Slot(0, b);
  for (int i = 0; i < 2; ++i) {
    SlotMemory* slot = i == 0 ? slot_a.get() : slot_b.get();
    auto handle = group->StartBucket({BucketSource{0, slot, nullptr}},
                                     OneTensor(absl::StrCat("t", i), i == 0 ? 1000 : 500),
                                     BucketContext{"u1", "v1", static_cast<uint64_t>(i), i == 1},
                                     absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(handle.ok()) << handle.status();
    ASSERT_TRUE((*handle)->WaitReusable().ok());
    std::vector<EngineOutcome> outcomes;
    ASSERT_TRUE((*handle)->WaitAnswered(&outcomes).ok());
    EXPECT_EQ(outcomes.size(), 2u);
  }
  std::vector<EngineOutcome> finished;
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &finished).ok());
  for (const char* url : {"http://a:1", "http://b:2"}) {
    EXPECT_THAT(engine(url).events(), ElementsAre("probe", "pause", "begin u1 v1", "finish u1 v1"))
        << url;
    std::vector<FakeBucket> got = engine(url).buckets();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].payloads, std::vector<std::string>{a});
    EXPECT_EQ(got[1].payloads, std::vector<std::string>{b});
    EXPECT_EQ(got[0].context.index, 0u);
    EXPECT_FALSE(got[0].context.last);
    EXPECT_EQ(got[1].context.index, 1u);
    EXPECT_TRUE(got[1].context.last);
    EXPECT_EQ(got[1].context.update_id, "u1");
    EXPECT_EQ(got[1].context.version, "v1");
  }
  GroupSnapshot snap = group->Snapshot();
  EXPECT_EQ(snap.state, GroupState::kReady);
  EXPECT_EQ(snap.last_version, "v1");
  EXPECT_EQ(snap.world_size, 3u);
  EXPECT_EQ(snap.rendezvous, "fake");
}

TEST_F(FakeGroupTest, ABucketWithTwoSourcesReachesEachEngineAsOnePayloadPerSource) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  // Two trainer ranks on two GPUs, each holding its shard of the same bucket (colocated TP=2).
  const std::string rank0 = Pattern(256, 3), rank1 = Pattern(256, 4);
  auto slot0 = Slot(0, rank0), slot1 = Slot(1, rank1);
  auto handle = group->StartBucket(
      {BucketSource{0, slot0.get(), nullptr}, BucketSource{1, slot1.get(), nullptr}},
      OneTensor("w", 256), BucketContext{"u1", "v1", 0, true}, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<EngineOutcome> outcomes;
  ASSERT_TRUE((*handle)->WaitAnswered(&outcomes).ok());
  for (const char* url : {"http://a:1", "http://b:2"}) {
    std::vector<FakeBucket> got = engine(url).buckets();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payloads, (std::vector<std::string>{rank0, rank1})) << url;
  }
}

TEST_F(FakeGroupTest, AFailedBucketBreaksTheGroupAndTheNextUpdateFormsItAgain) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  engine("http://b:2").FailNextAnswer(absl::InternalError("load_weights failed"));
  auto slot = Slot(0, Pattern(64, 5));
  auto handle =
      group->StartBucket({BucketSource{0, slot.get(), nullptr}}, OneTensor("w", 64),
                         BucketContext{"u1", "v1", 0, false}, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(handle.ok());
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = (*handle)->WaitAnswered(&outcomes);
  EXPECT_EQ(answered.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(answered.message(), HasSubstr("engine http://b:2: load_weights failed"));
  EXPECT_EQ(group->Snapshot().state, GroupState::kBroken) << "the transport's failure hook";
  // Broken, but the update's threads still hold its transport until the update ends.
  EXPECT_EQ(group->Destroy().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group->BeginUpdate(UpdateInfo{"u9", "v9"}).message(),
              HasSubstr("already being updated"));
  EXPECT_EQ(log_->formed, 1) << "not re-formed under the open update";
  std::vector<EngineOutcome> aborted;
  group->AbortUpdate("bucket failed", &aborted);
  EXPECT_EQ(group->Snapshot().state, GroupState::kBroken);
  // Both engines got the bucket (b failed loading it): each may hold part of v1, so neither
  // serves again until a complete update.
  EXPECT_EQ(engine("http://a:1").events().back(), "abandon") << "its session closed, not resumed";
  EXPECT_EQ(group->Snapshot().needs_full_version.size(), 2u);
  ASSERT_EQ(aborted.size(), 2u);
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u2", "v1"}).ok());
  EXPECT_EQ(log_->formed, 2) << "re-formed before the next update";
  EXPECT_EQ(log_->disbanded, 1) << "the engines were asked to drop the broken group first";
}

// An update that did not commit must not leave engines serving a mix of two versions under the
// old one's name: every engine a bucket reached stays paused and is named, until a complete
// update (or an operator's resume); the engines it never reached resume.
TEST_F(FakeGroupTest, AnAbortedUpdateKeepsTheEnginesItReachedPausedUntilACompleteOne) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  SendAnsweredBucket(*group, "u1", "v1", /*last=*/false);
  EXPECT_THAT(group->ReachedEngines(), ElementsAre("http://a:1", "http://b:2"));
  std::vector<EngineOutcome> outcomes;
  group->AbortUpdate("the trainer disconnected before commit", &outcomes);
  ASSERT_EQ(outcomes.size(), 2u);
  for (const EngineOutcome& o : outcomes) {
    EXPECT_EQ(o.status.code(), absl::StatusCode::kAborted) << o.engine;
    EXPECT_THAT(o.needs_full_version,
                HasSubstr("update u1 to version 'v1' reached it and was aborted: it may hold "
                          "part of it (the trainer disconnected before commit)"));
    EXPECT_THAT(engine(o.engine).events(), Not(Contains("resume"))) << o.engine;
  }
  GroupSnapshot snap = group->Snapshot();
  EXPECT_EQ(snap.state, GroupState::kReady);
  EXPECT_EQ(snap.needs_full_version.size(), 2u);
  EXPECT_TRUE(group->ReachedEngines().empty());

  // An update that ends before any bucket leaves them as they were: still waiting.
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u2", "v2"}).ok());
  group->AbortUpdate("aborted before any bucket");
  EXPECT_EQ(group->Snapshot().needs_full_version.size(), 2u);
  EXPECT_THAT(engine("http://a:1").events(), Not(Contains("resume")));

  // A complete update lands on both: they hold one version again and serve it.
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u3", "v3"}).ok());
  SendAnsweredBucket(*group, "u3", "v3", /*last=*/true);
  outcomes.clear();
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u3", "v3"}, absl::InfiniteFuture(), &outcomes).ok());
  for (const EngineOutcome& o : outcomes) EXPECT_EQ(o.needs_full_version, "") << o.engine;
  EXPECT_TRUE(group->Snapshot().needs_full_version.empty());
}

// A bucket the transport refuses reaches no engine (Transport::StartBucket): when it was the
// update's first, the engines hold nothing of the update and resume when it ends; once a bucket
// reached them, a later refused one does not clear that.
TEST_F(FakeGroupTest, ABucketRefusedBeforeAnyByteLeavesTheEnginesItWouldHaveReachedUntouched) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  log_->refuse_buckets = 1;
  auto slot = Slot(0, Pattern(64, 6));
  auto refused =
      group->StartBucket({BucketSource{0, slot.get(), nullptr}}, OneTensor("w", 64),
                         BucketContext{"u1", "v1", 0, false}, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(group->ReachedEngines().empty());
  std::vector<EngineOutcome> outcomes;
  group->AbortUpdate("the first bucket was refused", &outcomes);
  EXPECT_TRUE(outcomes.empty()) << "no engine to name";
  for (const char* url : {"http://a:1", "http://b:2"}) {
    EXPECT_EQ(engine(url).events().back(), "resume") << url;
    EXPECT_TRUE(engine(url).buckets().empty()) << url;
  }
  EXPECT_TRUE(group->Snapshot().needs_full_version.empty());

  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u2", "v2"}).ok());
  SendAnsweredBucket(*group, "u2", "v2", /*last=*/false);
  log_->refuse_buckets = 1;
  EXPECT_FALSE(group
                   ->StartBucket({BucketSource{0, slot.get(), nullptr}}, OneTensor("w", 64),
                                 BucketContext{"u2", "v2", 1, false},
                                 absl::Now() + absl::Seconds(5))
                   .ok());
  EXPECT_THAT(group->ReachedEngines(), ElementsAre("http://a:1", "http://b:2"));
  group->AbortUpdate("the second bucket was refused", &outcomes);
  EXPECT_EQ(group->Snapshot().needs_full_version.size(), 2u);
}

TEST_F(FakeGroupTest, AnUpdateEndedBeforeAnyBucketResumesEveryEngine) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  std::vector<EngineOutcome> outcomes;
  group->AbortUpdate("the trainer went away", &outcomes);
  EXPECT_TRUE(outcomes.empty()) << "no engine to name";
  for (const char* url : {"http://a:1", "http://b:2"}) {
    EXPECT_EQ(engine(url).events().back(), "resume") << url;
  }
  EXPECT_TRUE(group->Snapshot().needs_full_version.empty());
}

// All or nothing: when the commit fails on one engine, the one that failed it holds every bucket
// of a version it did not record, and the one that committed a version the group did not take:
// both stay paused, so that the group never serves two versions.
TEST_F(FakeGroupTest, AnEngineThatFailedTheCommitOfAnUpdateItLoadedStaysPaused) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  SendAnsweredBucket(*group, "u1", "v1", /*last=*/true);
  engine("http://b:2").FailCalls("finish", absl::NotFoundError("no /update_weight_version"));
  std::vector<EngineOutcome> outcomes;
  absl::Status s = group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes);
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_THAT(outcomes[0].needs_full_version,
              HasSubstr("it committed version 'v1' of update u1, which did not land on the group "
                        "(1 of 2 engines committed)"));
  EXPECT_THAT(outcomes[1].needs_full_version, HasSubstr("reached it and did not commit"));
  EXPECT_EQ(engine("http://a:1").events().back(), "pause");
  EXPECT_EQ(engine("http://b:2").events().back(), "pause");
  EXPECT_EQ(group->Snapshot().needs_full_version.size(), 2u);
  EXPECT_EQ(group->Snapshot().last_version, "");
}

TEST_F(FakeGroupTest, AGroupWhoseEnginesLostItIsFormedAgainBeforeTheUpdate) {
  auto group = MakeGroup();
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  log_->engines_lost = true;  // an engine restarted since the group formed
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  EXPECT_EQ(log_->formed, 2);
  EXPECT_EQ(group->Snapshot().state, GroupState::kUpdating);
}

TEST_F(FakeGroupTest, EnginesWithoutTheTransportsDataPathAreRefusedAtCreation) {
  auto group =
      WeightGroup::Create(FakeGroupSpec("policy", {"http://a:1"}), &platform_, GroupOptions{},
                          FakeGroupFactories(cluster_, FakeCapabilities{"cuda-ipc"}));
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.status().message(),
              HasSubstr("http://a:1 cannot receive over the broadcast data path"));
}

TEST_F(FakeGroupTest, TheEnginesBucketRulesAreTheGroupsAndABucketBreakingOneIsRefused) {
  BucketRules one_dtype;
  one_dtype.one_dtype = true;
  auto group = MakeGroup(FakeCapabilities{"broadcast", one_dtype});
  ASSERT_NE(group, nullptr);
  EXPECT_TRUE(group->bucket_rules().one_dtype);
  EXPECT_TRUE(group->Snapshot().bucket_rules.one_dtype);
  BucketManifest mixed;
  mixed.tensors.push_back(TensorEntry{"w", DType::kBfloat16, {4}, 0, 8});
  mixed.tensors.push_back(TensorEntry{"b", DType::kFloat32, {2}, 8, 8});
  absl::Status s = group->ValidateBucket(mixed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'b'"));
  EXPECT_TRUE(group->ValidateBucket(OneTensor("w", 64, DType::kBfloat16)).ok());
}

TEST(EngineAdapterHooks, APathWithoutABindingCannotBeUsed) {
  FakeAdapter adapter(EngineEndpoint{"http://a:1", 1, 1}, std::make_shared<FakeEngine>(),
                      FakeCapabilities());
  EXPECT_EQ(adapter.Binding("cuda-ipc"), nullptr);
  EXPECT_EQ(adapter.used_binding(), nullptr);
  absl::Status s = adapter.UseDataPath("cuda-ipc");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("engine http://a:1 cannot receive over the cuda-ipc"));
  EXPECT_EQ(adapter.used_binding(), nullptr);
  ASSERT_TRUE(adapter.UseDataPath("broadcast").ok());
  EXPECT_EQ(adapter.used_binding(), adapter.Binding("broadcast"));
  EXPECT_EQ(adapter.used_binding()->data_path(), "broadcast");
  EXPECT_TRUE(adapter.BeginUpdate(UpdateInfo{}).ok()) << "most engines need nothing there";
}

// What the trainer's stream would hear.
class RecordingEvents final : public UpdateEvents {
 public:
  void BucketDone(uint64_t sequence, uint64_t, uint32_t, const BucketTiming&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(sequence);
    cv_.notify_all();
  }
  void SlotFree(uint32_t slot) override {
    std::lock_guard<std::mutex> lock(mu_);
    freed_.push_back(slot);
    cv_.notify_all();
  }
  void SourcesRead(uint64_t) override {}
  void Failed(const UpdateOutcome&) override {}
  // True once `slot` was freed `times` times, false at the deadline.
  bool WaitFreed(uint32_t slot, size_t times, absl::Duration within) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(within), [&] {
      return static_cast<size_t>(std::count(freed_.begin(), freed_.end(), slot)) >= times;
    });
  }
  std::vector<uint64_t> done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint32_t> freed_;
  std::vector<uint64_t> done_;
};

class FakeDaemonTest : public ::testing::Test {
 protected:
  void Start(FakeTransportOptions options, absl::Duration bucket_timeout = absl::Seconds(10)) {
    DaemonOptions daemon;
    daemon.slots_per_device = 2;
    daemon.slot_bytes = kSlotBytes;
    daemon.bucket_timeout = bucket_timeout;
    daemon.engine_networks = *NetworkAllowList::Parse({"a"});
    core_ = std::make_unique<DaemonCore>(std::make_unique<HostPlatform>("127.0.0.1", "127.0.0.1"),
                                         daemon,
                                         FakeGroupFactories(cluster_, FakeCapabilities(), options));
    auto created = core_->CreateGroup(FakeGroupSpec("policy", {"http://a:1"}));
    ASSERT_TRUE(created.ok()) << created.status();
    auto session = core_->OpenSession(0, "core test");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *session;
  }
  // Fills slot `slot` as a trainer would and submits it.
  absl::Status Submit(UpdateMember& run, uint32_t slot, const std::string& bytes, uint64_t sequence,
                      bool last) {
    std::memcpy(session_.slots[slot]->data(), bytes.data(), bytes.size());
    return run.SubmitBucket(slot, OneTensor(absl::StrCat("t", sequence), bytes.size()),
                            Crc32(bytes.data(), bytes.size()), sequence, {}, last);
  }
  FakeEngine& engine() { return *cluster_->Engine("http://a:1"); }

  std::shared_ptr<FakeCluster> cluster_ = std::make_shared<FakeCluster>();
  std::unique_ptr<DaemonCore> core_;
  SessionView session_;
};

TEST_F(FakeDaemonTest, AFullUpdateFromASessionReachesTheEngineByteForByte) {
  Start({});
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v7", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  const std::string a = Pattern(kSlotBytes, 1), b = Pattern(100, 2), c = Pattern(kSlotBytes, 3);
  ASSERT_TRUE(Submit(**run, 0, a, 0, false).ok());
  ASSERT_TRUE(Submit(**run, 1, b, 1, false).ok());
  ASSERT_TRUE(events.WaitFreed(0, 1, absl::Seconds(5)));
  ASSERT_TRUE(Submit(**run, 0, c, 2, true).ok());
  UpdateOutcome outcome = (*run)->Commit();
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_EQ(outcome.buckets, 3u);
  EXPECT_EQ(outcome.bytes, 2 * kSlotBytes + 100);
  EXPECT_THAT(events.done(), ElementsAre(0, 1, 2));
  std::vector<FakeBucket> got = engine().buckets();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payloads[0], a);
  EXPECT_EQ(got[1].payloads[0], b);
  EXPECT_EQ(got[2].payloads[0], c);
  EXPECT_EQ(got[2].context.index, 2u);
  EXPECT_TRUE(got[2].context.last);
  EXPECT_FALSE(got[1].context.last);
  EXPECT_EQ(got[0].context.version, "v7");
  const std::string id = got[0].context.update_id;
  EXPECT_THAT(engine().events(), ElementsAre("probe", "pause", absl::StrCat("begin ", id, " v7"),
                                             absl::StrCat("finish ", id, " v7")));
}

TEST_F(FakeDaemonTest, ASessionsGroupsAreCappedFrozenDuringAnUpdateAndEndWithTheSession) {
  Start({});
  const std::string id = session_.id;
  for (int i = 0; i < 8; ++i) {
    auto declared = core_->DeclareSessionGroup(
        id, FakeGroupSpec(absl::StrCat("mine-", i), {absl::StrCat("http://a:", 10 + i)}));
    ASSERT_TRUE(declared.ok()) << declared.status();
    EXPECT_TRUE(declared->second) << "formed now";
  }
  auto ninth = core_->DeclareSessionGroup(id, FakeGroupSpec("mine-8", {"http://a:30"}));
  EXPECT_EQ(ninth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(ninth.status().message(), HasSubstr("has declared 8 groups, the most a session may"));
  // The same declaration again is no new group.
  auto again = core_->DeclareSessionGroup(id, FakeGroupSpec("mine-0", {"http://a:10"}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->second);
  // While an update of it runs its engines stay as they are.
  RecordingEvents events;
  auto run = core_->BeginUpdate(id, "mine-0", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  auto changed =
      core_->DeclareSessionGroup(id, FakeGroupSpec("mine-0", {"http://a:10", "http://a:11"}));
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(changed.status().message(), HasSubstr("is being updated"));
  (*run)->Abort(absl::CancelledError("test"));
  run->reset();
  // A declaration that cannot form leaves the group it would replace as it is.
  auto outside = core_->DeclareSessionGroup(id, FakeGroupSpec("mine-0", {"http://b:1"}));
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(core_->GetGroup("mine-0").ok());
  // The operator's group is no session's to take or forget.
  EXPECT_EQ(core_->DeclareSessionGroup(id, FakeGroupSpec("policy", {"http://a:1"})).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(core_->ForgetSessionGroup(id, "policy").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(core_->ForgetSessionGroup(id, "mine-7").ok());
  EXPECT_EQ(core_->ListGroups().size(), 8u) << "policy and mine-0 to mine-6";
  ASSERT_TRUE(core_->CloseSession(id).ok());
  const std::vector<GroupSnapshot> left = core_->ListGroups();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].spec.name, "policy");
}

TEST_F(FakeDaemonTest, ADrainingWsyncdKeepsASessionsGroupForItsTrainersNextDeclaration) {
  Start({});
  ASSERT_TRUE(core_->DeclareSessionGroup(session_.id, FakeGroupSpec("mine", {"http://a:5"})).ok());
  (void)core_->Drain(absl::Seconds(1));
  ASSERT_TRUE(core_->CloseSession(session_.id).ok());
  EXPECT_TRUE(core_->GetGroup("mine").ok()) << "kept, as after a crash";
  core_->Undrain();
  auto next = core_->OpenSession(0, "the trainer again");
  ASSERT_TRUE(next.ok()) << next.status();
  auto again = core_->DeclareSessionGroup(next->id, FakeGroupSpec("mine", {"http://a:5"}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->second) << "taken as it is";
  ASSERT_TRUE(core_->CloseSession(next->id).ok());
  EXPECT_FALSE(core_->GetGroup("mine").ok()) << "ended with the session that took it";
}

TEST_F(FakeDaemonTest, OversizedOrUnprintableNamesAreRefusedBeforeAnythingIsKept) {
  Start({});
  RecordingEvents events;
  const std::string huge(1 << 20, 'v');
  for (const std::string& version : {huge, std::string("v1\n2026-11-23 I forged line")}) {
    auto run = core_->BeginUpdate(session_.id, "policy", version, &events);
    EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(run.status().message(), HasSubstr("the version"));
    EXPECT_LT(run.status().message().size(), 200u) << "the error does not echo the text";
  }
  auto bad_group = core_->BeginUpdate(session_.id, std::string(4096, 'g'), "v1", &events);
  EXPECT_THAT(bad_group.status().message(), HasSubstr("the group name is 4096 bytes"));
  EXPECT_TRUE(core_->ListUpdates(10).empty()) << "nothing of a refused update is kept";
  EXPECT_THAT(core_->OpenSession(0, "rank\r0").status().message(),
              HasSubstr("the client name has a control character (0x0d)"));
  EXPECT_TRUE(engine().events() == std::vector<std::string>{"probe"}) << "no engine was paused";
  // A name at the limit is fine.
  auto run = core_->BeginUpdate(session_.id, "policy", std::string(kMaxVersionBytes, 'v'), &events);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE((*run)->Abort(absl::AbortedError("done")).status.code() ==
              absl::StatusCode::kAborted);
}

// A trainer that begins an update and then sends nothing must not keep the engines paused for
// as long as its connection lives: the bucket timeout bounds its silence.
TEST_F(FakeDaemonTest, ATrainerSilentBeforeItsFirstBucketEndsTheUpdateAtTheBucketTimeout) {
  Start({}, absl::Milliseconds(300));
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (engine().events().back() != "resume" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(engine().events().back(), "resume") << "the engine got nothing and serves again";
  UpdateOutcome outcome = (*run)->Commit();
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.status.message(), HasSubstr("the trainer sent no bucket for 300ms"));
  ASSERT_EQ(core_->ListUpdates(1).size(), 1u);
  EXPECT_EQ(core_->ListUpdates(1)[0].state, "failed");
}

TEST_F(FakeDaemonTest, ATrainerSilentBetweenBucketsEndsTheUpdateAndTheEngineWaitsPaused) {
  Start({}, absl::Milliseconds(300));
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(Submit(**run, 0, Pattern(100, 1), 0, false).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (core_->ListUpdates(1)[0].state == "running" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  UpdateOutcome outcome = (*run)->Abort(absl::AbortedError("late"));
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.status.message(), HasSubstr("the trainer sent nothing more for 300ms"));
  EXPECT_THAT(outcome.status.message(),
              HasSubstr("left paused, waiting for a full version: http://a:1"));
  EXPECT_THAT(engine().events(), Not(Contains("resume")))
      << "it holds the first bucket of v1: it must not serve that mix";
  const std::vector<EngineRow> rows = core_->ListEngines();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_THAT(rows[0].needs_full_version, HasSubstr("reached it and was aborted"));
}

// A 16 MiB tensor name would be kept, logged and quoted in every refusal: refused at the door,
// quoted cut and escaped.
TEST_F(FakeDaemonTest, OversizedOrUnprintableTensorNamesAreRefusedAndQuotedCut) {
  Start({});
  RecordingEvents events;
  for (const std::string& name :
       {std::string(16 << 20, 'n'), std::string("w\n2026-11-27T00:00:00.000 I forged")}) {
    auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
    ASSERT_TRUE(run.ok()) << run.status();
    std::string bad = name;
    if (bad.size() < 100) bad[1] = '\n';
    BucketManifest m;
    m.tensors.push_back(TensorEntry{bad, DType::kUint8, {8}, 0, 8});
    std::memcpy(session_.slots[0]->data(), "abcdefgh", 8);
    absl::Status s = (*run)->SubmitBucket(0, m, Crc32("abcdefgh", 8), 0, {}, true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("the name of tensor 0"));
    EXPECT_LT(s.message().size(), 600u);
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
    UpdateOutcome outcome = (*run)->Abort(s);
    EXPECT_LT(outcome.status.message().size(), 600u);
  }
  EXPECT_TRUE(engine().buckets().empty()) << "nothing of a refused bucket reaches the engine";
  for (const UpdateRecord& r : core_->ListUpdates(10)) {
    EXPECT_LT(r.status.message().size(), 600u);
  }
}

// A pull-mode bucket is resolved (ResolveSources) before UpdateRun::SubmitBucket checks its names:
// whatever a refusal quotes becomes the update's outcome, the abort reason and the
// needs-full-version reason of every engine reached (kept, shown by wsyncctl): all bounded and
// escaped.
TEST_F(FakeDaemonTest, APullBucketsRefusalIsBoundedAndEscapedWhereverItIsKept) {
  Start({});
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(Submit(**run, 0, Pattern(100, 1), 0, false).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (events.done().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(events.done().size(), 1u) << "bucket 0 reached the engine";
  BucketManifest m;
  const std::string name = std::string(1 << 20, 'n') + "\n2026-11-27T00:00:00.000 I forged";
  m.tensors.push_back(TensorEntry{name, DType::kUint8, {8}, 0, 8});
  auto resolved = core_->ResolveSources(session_.id, {}, {TensorSourceRef{99, 0}}, m);
  ASSERT_FALSE(resolved.ok());
  // As TrainerService::SubmitBucket does with it.
  const absl::Status refused(resolved.status().code(),
                             absl::StrCat("bucket 1 refused: ", resolved.status().message()));
  UpdateOutcome outcome = (*run)->Abort(refused);
  EXPECT_LT(outcome.status.message().size(), 8192u) << "outcome (trainer result, log)";
  EXPECT_EQ(outcome.status.message().find('\n'), std::string::npos);
  const std::vector<EngineRow> rows = core_->ListEngines();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_LT(rows[0].needs_full_version.size(), 4096u) << "needs-full reason, persisted";
  EXPECT_EQ(rows[0].needs_full_version.find('\n'), std::string::npos);
}

// A tensor with a million dimensions (a 64 MiB gRPC message holds ~60M packed 1s) is refused
// without quoting its shape.
TEST_F(FakeDaemonTest, ATensorWithTooManyDimensionsIsRefusedWithoutQuotingItsShape) {
  Start({});
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  BucketManifest m;
  m.tensors.push_back(TensorEntry{"w", DType::kUint8, std::vector<int64_t>(1 << 20, 1), 0, 8});
  std::memcpy(session_.slots[0]->data(), "abcdefgh", 8);
  absl::Status s = (*run)->SubmitBucket(0, m, Crc32("abcdefgh", 8), 0, {}, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has 1048576 dimensions; at most 64 are allowed"));
  EXPECT_LT(s.message().size(), 4096u);
  UpdateOutcome outcome = (*run)->Abort(s);
  EXPECT_LT(outcome.status.message().size(), 4096u);
}

TEST(PeerText, IsCutAndEscapedForLogsAndErrors) {
  EXPECT_EQ(SanitizePeerText("a\nb\x7f"), "a\\x0ab\\x7f");
  EXPECT_EQ(SanitizePeerText(std::string(10, 'x'), 4), "xxxx...");
  EXPECT_EQ(SanitizePeerText("fine"), "fine");
  // Always UTF-8, as protobuf strings must be: well-formed characters stay, stray bytes and a
  // character the cut splits are escaped.
  EXPECT_EQ(SanitizePeerText("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(SanitizePeerText("a\x80"
                             "b\xff"
                             "c"),
            "a\\x80b\\xffc");
  EXPECT_EQ(SanitizePeerText("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a surrogate";
  EXPECT_EQ(SanitizePeerText("\xc0\xaf"), "\\xc0\\xaf") << "an overlong form";
  EXPECT_EQ(SanitizePeerText("ab\xe2\x82\xac", 4), "ab\\xe2\\x82...");
}

TEST_F(FakeDaemonTest, ASlotWaitsForTheAnswerWhenTheTransportReusesItOnlyThen) {
  Start(FakeTransportOptions{FakeReuse::kOnceAnswered});
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  engine().HoldAnswers();
  ASSERT_TRUE(Submit(**run, 0, Pattern(512, 1), 0, true).ok());
  EXPECT_FALSE(events.WaitFreed(0, 1, absl::Milliseconds(300)))
      << "the engine still reads the slot until it answers";
  engine().ReleaseAnswers();
  EXPECT_TRUE(events.WaitFreed(0, 1, absl::Seconds(5)));
  EXPECT_TRUE((*run)->Commit().status.ok());
}

TEST_F(FakeDaemonTest, ASlotIsFreedBeforeTheAnswerWhenTheTransportIsDoneWithItSooner) {
  Start(FakeTransportOptions{FakeReuse::kOnceCopied});
  RecordingEvents events;
  auto run = core_->BeginUpdate(session_.id, "policy", "v1", &events);
  ASSERT_TRUE(run.ok()) << run.status();
  engine().HoldAnswers();
  ASSERT_TRUE(Submit(**run, 0, Pattern(512, 1), 0, true).ok());
  EXPECT_TRUE(events.WaitFreed(0, 1, absl::Seconds(5))) << "freed while the answer is held";
  EXPECT_TRUE(events.done().empty());
  engine().ReleaseAnswers();
  EXPECT_TRUE((*run)->Commit().status.ok());
  EXPECT_THAT(events.done(), ElementsAre(0));
}

TEST(EngineNetworks, AGroupIsCreatedOnlyWhenEveryEngineResolvesInsideTheList) {
  auto cluster = std::make_shared<FakeCluster>();
  DaemonOptions options;
  options.engine_networks = *NetworkAllowList::Parse({"10.0.0.0/8"});
  options.resolve_host = [](const std::string& host) -> absl::StatusOr<std::vector<IpAddress>> {
    if (host == "engine.internal") return std::vector<IpAddress>{*IpAddress::Parse("10.0.0.5")};
    if (host == "db.internal") return std::vector<IpAddress>{*IpAddress::Parse("192.168.0.9")};
    return absl::UnavailableError("no such name");
  };
  DaemonCore core(std::make_unique<HostPlatform>("127.0.0.1", "127.0.0.1"), options,
                  FakeGroupFactories(cluster, FakeCapabilities()));
  EXPECT_TRUE(core.CreateGroup(FakeGroupSpec("inside", {"http://engine.internal:1"})).ok());
  absl::StatusOr<GroupSnapshot> outside = core.CreateGroup(
      FakeGroupSpec("outside", {"http://engine.internal:2", "http://db.internal:3"}));
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(outside.status().message(),
            "group 'outside': engine http://db.internal:3 is not allowed by engine_networks: "
            "'db.internal' resolves to 192.168.0.9, which is not in 10.0.0.0/8");
  EXPECT_EQ(core.DeclareGroup(FakeGroupSpec("unknown", {"http://nowhere.internal:4"})).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(cluster->Engine("http://db.internal:3")->events(), ::testing::IsEmpty())
      << "refused before any call to any engine of the group";
  EXPECT_THAT(cluster->Engine("http://engine.internal:2")->events(), ::testing::IsEmpty());
  EXPECT_EQ(core.ListGroups().size(), 1u);
}

}  // namespace
}  // namespace wsync
