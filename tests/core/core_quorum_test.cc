// A group's failure policy with fake engines and a fake transport: a quorum group goes on without
// engines that fail their probe, join, pause or commit (renumbering the ranks of those it keeps),
// commits once enough engines committed, and holds back each engine it left out until a full
// version; an all-or-nothing group fails instead.
#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"
#include "common/host/host_platform.h"
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
using ::testing::IsEmpty;
using ::testing::Not;

constexpr const char* kA = "http://a:1";
constexpr const char* kB = "http://b:2";
constexpr const char* kC = "http://c:3";

class QuorumTest : public ::testing::Test {
 protected:
  std::shared_ptr<WeightGroup> MakeGroup(uint32_t quorum, const GroupRecord* previous = nullptr) {
    GroupSpec spec = FakeGroupSpec("policy", {kA, kB, kC});
    spec.quorum = quorum;
    // The background check of engines left out runs often, so that tests wait little for it.
    GroupOptions options;
    options.left_out_check_interval = absl::Milliseconds(20);
    auto group = WeightGroup::Create(spec, &platform_, options,
                                     FakeGroupFactories(cluster_, FakeCapabilities(), {}, log_),
                                     nullptr, previous);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *group : nullptr;
  }
  FakeEngine& engine(const std::string& url) { return *cluster_->Engine(url); }
  // Waits (5 s at most) until the group's background check heard `url` answer again.
  static bool HeardAgain(const WeightGroup& group, const std::string& url) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (absl::Now() < deadline) {
      if (group.AnsweringAgain().count(url) != 0) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  // One bucket of `bytes` through the group's transport, answered by every engine it reaches.
  void SendBucket(WeightGroup& group, const std::string& update, const std::string& bytes) {
    auto slot = platform_.AllocateSlot(0, 4096);
    ASSERT_TRUE(slot.ok());
    std::memcpy((*slot)->data(), bytes.data(), bytes.size());
    BucketManifest m;
    m.tensors.push_back(
        TensorEntry{"w", DType::kUint8, {static_cast<int64_t>(bytes.size())}, 0, bytes.size()});
    auto handle =
        group.StartBucket({BucketSource{0, slot->get(), nullptr}}, m,
                          BucketContext{update, "", 0, true}, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(handle.ok()) << handle.status();
    ASSERT_TRUE((*handle)->WaitReusable().ok());
    std::vector<EngineOutcome> outcomes;
    ASSERT_TRUE((*handle)->WaitAnswered(&outcomes).ok());
  }
  // Forms the group, begins update u1 to v1 and sends it one bucket that every engine takes.
  void BeginWithOneBucket(WeightGroup& group) {
    ASSERT_TRUE(group.Form().ok());
    ASSERT_TRUE(group.BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
    SendBucket(group, "u1", "abc");
  }
  // One update of one bucket, committed.
  void Update(WeightGroup& group, const std::string& id) {
    ASSERT_TRUE(group.BeginUpdate(UpdateInfo{id, id}).ok());
    SendBucket(group, id, "xy");
    std::vector<EngineOutcome> outcomes;
    ASSERT_TRUE(group.FinishUpdate(UpdateInfo{id, id}, absl::InfiniteFuture(), &outcomes).ok());
  }
  // Each engine's URL and rank offset, as the group numbers them now.
  static std::vector<std::pair<std::string, uint32_t>> Offsets(const GroupSnapshot& snap) {
    std::vector<std::pair<std::string, uint32_t>> out;
    for (const EngineEndpoint& e : snap.endpoints) out.emplace_back(e.url, e.rank_offset);
    return out;
  }

  HostPlatform platform_{"127.0.0.1", "127.0.0.1"};
  std::shared_ptr<FakeCluster> cluster_ = std::make_shared<FakeCluster>();
  std::shared_ptr<FakeTransportLog> log_ = std::make_shared<FakeTransportLog>();
};

TEST_F(QuorumTest, AnEngineThatFailsItsProbeIsLeftOutUntilItAnswersAgain) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kB).FailCalls("probe", absl::UnavailableError("engine unreachable"));
  ASSERT_TRUE(group->Form().ok());
  GroupSnapshot snap = group->Snapshot();
  EXPECT_EQ(snap.world_size, 3u) << "wsyncd and the two engines kept";
  // The engines kept are numbered as if b were never there; b keeps no rank of the formation.
  const auto offsets = Offsets(snap);
  EXPECT_EQ(offsets[0], std::make_pair(std::string(kA), 1u));
  EXPECT_EQ(offsets[2], std::make_pair(std::string(kC), 2u));

  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  SendBucket(*group, "u1", "abcdef");
  std::vector<EngineOutcome> outcomes;
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes).ok());
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_TRUE(outcomes[0].status.ok());
  EXPECT_EQ(outcomes[1].engine, kB);
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(outcomes[1].status.message(), HasSubstr("left out of this update: "));
  EXPECT_THAT(outcomes[1].status.message(), HasSubstr("engine unreachable"));
  EXPECT_TRUE(outcomes[2].status.ok());
  EXPECT_EQ(engine(kA).buckets().size(), 1u);
  EXPECT_EQ(engine(kC).buckets().size(), 1u);
  EXPECT_THAT(engine(kB).buckets(), IsEmpty()) << "nothing reaches an engine left out";
  // b was asked to probe when the group formed, never on the update's path (only its health, in
  // the background), and, the version landing without it, to pause: it must not serve an older
  // version as if it were the group's.
  EXPECT_THAT(engine(kB).events(), ElementsAre("probe", "pause"));
  snap = group->Snapshot();
  EXPECT_EQ(snap.last_version, "v1");
  EXPECT_THAT(snap.error, HasSubstr("version 'v1' committed on 2 of 3 engines (quorum 2)"));
  ASSERT_EQ(snap.needs_full_version.count(kB), 1u);
  EXPECT_THAT(snap.needs_full_version[kB], HasSubstr("missed version 'v1'"));

  // Back: the next update forms the group again with all three, b numbered between a and c, and
  // the full version it gets lets it serve again.
  engine(kB).FailCalls("probe", absl::OkStatus());
  ASSERT_TRUE(HeardAgain(*group, kB));
  const int formed = log_->formed;
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u2", "v2"}).ok());
  EXPECT_EQ(log_->formed, formed + 1);
  snap = group->Snapshot();
  EXPECT_EQ(snap.world_size, 4u);
  EXPECT_EQ(Offsets(snap)[1], std::make_pair(std::string(kB), 2u));
  EXPECT_EQ(Offsets(snap)[2], std::make_pair(std::string(kC), 3u));
  SendBucket(*group, "u2", "ghij");
  outcomes.clear();
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u2", "v2"}, absl::InfiniteFuture(), &outcomes).ok());
  for (const EngineOutcome& o : outcomes) EXPECT_TRUE(o.status.ok()) << o.engine;
  EXPECT_EQ(engine(kB).buckets().size(), 1u);
  EXPECT_THAT(group->Snapshot().needs_full_version, IsEmpty());
}

TEST_F(QuorumTest, AnEngineStillDownIsNotFormedAgainForEachUpdate) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kC).FailCalls("probe", absl::UnavailableError("engine unreachable"));
  ASSERT_TRUE(group->Form().ok());
  for (const char* id : {"u1", "u2"}) {
    ASSERT_TRUE(group->BeginUpdate(UpdateInfo{id, id}).ok());
    SendBucket(*group, id, "xy");
    std::vector<EngineOutcome> outcomes;
    ASSERT_TRUE(group->FinishUpdate(UpdateInfo{id, id}, absl::InfiniteFuture(), &outcomes).ok());
    EXPECT_EQ(outcomes[2].status.code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(log_->formed, 1) << "the formation without c is kept while c stays down";
}

// An engine that is down costs an update nothing: it is asked only in the background, so the
// update never waits for its timeout (each update used to probe it again, and a real engine that
// does not answer holds a probe for the whole control timeout).
TEST_F(QuorumTest, AnEngineLeftOutIsCheckedInTheBackgroundNeverOnTheUpdatesPath) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kC).FailCalls("probe", absl::UnavailableError("engine unreachable"));
  ASSERT_TRUE(group->Form().ok());
  for (const char* id : {"u1", "u2", "u3"}) Update(*group, id);
  EXPECT_THAT(engine(kC).events(), ElementsAre("probe", "pause", "pause", "pause"))
      << "no probe of c on any update's path";
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (engine(kC).health_checks() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_GE(engine(kC).health_checks(), 2) << "checked in the background";
  EXPECT_EQ(engine(kA).health_checks(), 0) << "members are not checked";
  EXPECT_EQ(group->AnsweringAgain().count(kC), 0u);
  // Once it answers, the next update takes it back.
  engine(kC).FailCalls("probe", absl::OkStatus());
  ASSERT_TRUE(HeardAgain(*group, kC));
  Update(*group, "u4");
  EXPECT_THAT(engine(kC).events(), Contains("finish u4 u4"));
  EXPECT_THAT(group->Snapshot().needs_full_version, IsEmpty());
}

TEST_F(QuorumTest, TooFewEnginesLeftFailsNamingEachOneLeftOut) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kB).FailCalls("probe", absl::UnavailableError("engine unreachable"));
  engine(kC).FailCalls("probe", absl::FailedPreconditionError("version 0.4.0 is too old"));
  absl::Status formed = group->Form();
  EXPECT_EQ(formed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(formed.message(), HasSubstr("needs 2 of its 3 engines and 1 are left"));
  EXPECT_THAT(formed.message(), HasSubstr("http://b:2: engine unreachable"));
  EXPECT_THAT(formed.message(), HasSubstr("http://c:3: version 0.4.0 is too old"));
  EXPECT_EQ(group->Snapshot().state, GroupState::kBroken);
  EXPECT_EQ(log_->formed, 0);
}

TEST_F(QuorumTest, AnEngineThatFailsToJoinIsLeftOutAndTheRestFormAgain) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kA).FailCalls("join", absl::DeadlineExceededError("rank 1 never registered"));
  ASSERT_TRUE(group->Form().ok());
  EXPECT_EQ(log_->formed, 1) << "one formation that failed, then one without a";
  const auto offsets = Offsets(group->Snapshot());
  EXPECT_EQ(offsets[1], std::make_pair(std::string(kB), 1u));
  EXPECT_EQ(offsets[2], std::make_pair(std::string(kC), 2u));
  EXPECT_EQ(group->Snapshot().world_size, 3u);
}

TEST_F(QuorumTest, AnEngineThatFailsToPauseIsLeftOutAndTheGroupFormsWithoutIt) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  EXPECT_EQ(group->Snapshot().world_size, 4u);
  engine(kC).FailCalls("pause", absl::UnavailableError("engine unreachable"));
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  // The collective counts every rank it formed with: it is made again without c.
  EXPECT_EQ(log_->disbanded, 1);
  EXPECT_EQ(log_->formed, 2);
  EXPECT_EQ(group->Snapshot().world_size, 3u);
  SendBucket(*group, "u1", "pq");
  std::vector<EngineOutcome> outcomes;
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes).ok());
  EXPECT_THAT(outcomes[2].status.message(), HasSubstr("left out of this update"));
  EXPECT_THAT(engine(kC).buckets(), IsEmpty());
  EXPECT_THAT(engine(kC).events(), Not(Contains("finish u1 v1")));
  EXPECT_EQ(group->Snapshot().needs_full_version.count(kC), 1u);
}

TEST_F(QuorumTest, ACommitByEnoughEnginesLandsAndTheOneThatFailedWaitsForAFullVersion) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  BeginWithOneBucket(*group);
  engine(kB).FailCalls("finish", absl::InternalError("answered HTTP 500"));
  std::vector<EngineOutcome> outcomes;
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes).ok());
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(engine(kB).events().back(), "pause") << "held back after its commit failed";
  const GroupSnapshot snap = group->Snapshot();
  EXPECT_EQ(snap.last_version, "v1");
  EXPECT_THAT(snap.needs_full_version.at(kB), HasSubstr("missed version 'v1': answered HTTP 500"));
}

TEST_F(QuorumTest, ACommitByTooFewEnginesFailsAndSaysHowManyCommitted) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  BeginWithOneBucket(*group);
  engine(kB).FailCalls("finish", absl::InternalError("answered HTTP 500"));
  engine(kC).FailCalls("finish", absl::InternalError("answered HTTP 503"));
  std::vector<EngineOutcome> outcomes;
  absl::Status s = group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("commit failed: 1 of 3 engines committed, quorum 2"));
  EXPECT_THAT(s.message(), HasSubstr("http://c:3: answered HTTP 503"));
  EXPECT_EQ(group->Snapshot().last_version, "");
}

TEST_F(QuorumTest, WithoutAQuorumOneEngineThatFailsToPauseFailsTheUpdate) {
  auto group = MakeGroup(0);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  engine(kC).FailCalls("pause", absl::UnavailableError("engine unreachable"));
  absl::Status s = group->BeginUpdate(UpdateInfo{"u1", "v1"});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log_->formed, 1);
  EXPECT_EQ(engine(kA).events().back(), "resume");
}

// An engine that answers its probe but cannot join (or pause) would make every update form the
// group again, on a broadcast a new NCCL group and a wait for the join: it backs off instead.
TEST_F(QuorumTest, AnEngineThatKeepsFailingToJoinIsNotTriedAtEveryUpdate) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kC).FailCalls("join", absl::DeadlineExceededError("rank never registered"));
  ASSERT_TRUE(group->Form().ok());
  const int formed = log_->formed, disbanded = log_->disbanded;
  for (const char* id : {"u1", "u2", "u3"}) Update(*group, id);
  EXPECT_EQ(log_->formed, formed);
  EXPECT_EQ(log_->disbanded, disbanded);
  EXPECT_THAT(engine(kC).events(), ElementsAre("probe", "pause", "pause", "pause"))
      << "probed once, then only paused (held back) after each version it missed";
}

TEST_F(QuorumTest, AnEngineThatKeepsFailingToPauseCostsOneFormationNotOnePerUpdate) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  engine(kC).FailCalls("pause", absl::InternalError("pause refused"));
  const int formed = log_->formed, disbanded = log_->disbanded;
  for (const char* id : {"u1", "u2", "u3"}) Update(*group, id);
  EXPECT_EQ(log_->formed, formed + 1);
  EXPECT_EQ(log_->disbanded, disbanded + 1);
}

TEST_F(QuorumTest, ACommitShortOfTheQuorumResumesAnEngineSetAsideBeforeAnyBucket) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  engine(kC).FailCalls("begin", absl::InternalError("begin refused"));
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  SendBucket(*group, "u1", "abc");
  engine(kB).FailCalls("finish", absl::InternalError("answered HTTP 500"));
  std::vector<EngineOutcome> outcomes;
  EXPECT_FALSE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes).ok());
  // c got no byte of v1: it still holds its earlier version whole and serves it again.
  EXPECT_EQ(engine(kC).events().back(), "resume");
  EXPECT_EQ(group->Snapshot().needs_full_version.count(kC), 0u);
}

TEST_F(QuorumTest, AnEngineFormedBackInByTheSameUpdateIsNotLeftOut) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kC).FailCalls("probe", absl::UnavailableError("down"));
  ASSERT_TRUE(group->Form().ok());
  // c answers again, but before the background check hears it the update sets it aside; then
  // the group is found lost and forms again, with c back.
  engine(kC).FailCalls("probe", absl::OkStatus());
  log_->engines_lost = true;
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  SendBucket(*group, "u1", "abc");
  std::vector<EngineOutcome> outcomes;
  ASSERT_TRUE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes).ok());
  EXPECT_TRUE(outcomes[2].status.ok()) << outcomes[2].status;
  EXPECT_EQ(engine(kC).buckets().size(), 1u);
  EXPECT_THAT(engine(kC).events(), Contains("finish u1 v1"));
}

TEST_F(QuorumTest, AnEarlierRecordsEnginesAreAskedToDropItsGroupWhateverItsQuorum) {
  // The record's engines may have been cut to those still allowed, below its quorum; the group
  // made from it only asks them to drop the old name and never forms.
  GroupRecord previous;
  previous.spec = FakeGroupSpec("policy", {kA});
  previous.spec.quorum = 2;
  previous.engine_group = "policy.old";
  auto group = MakeGroup(2, &previous);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  EXPECT_THAT(engine(kA).events(), Contains("leave-stale policy.old"));
}

// One left-out engine answering again must not cost the update a probe of another left-out
// engine that is still down.
TEST_F(QuorumTest, AnEngineStillDownIsNotProbedWhenAnotherComesBack) {
  auto group = MakeGroup(1);
  ASSERT_NE(group, nullptr);
  engine(kB).FailCalls("probe", absl::UnavailableError("b down"));
  engine(kC).FailCalls("probe", absl::UnavailableError("c down"));
  ASSERT_TRUE(group->Form().ok());
  Update(*group, "u1");
  engine(kB).FailCalls("probe", absl::OkStatus());  // b is back, c stays down
  ASSERT_TRUE(HeardAgain(*group, kB));
  const auto probes = [&](const char* url) {
    const std::vector<std::string> ev = engine(url).events();
    return std::count(ev.begin(), ev.end(), "probe");
  };
  const auto c_before = probes(kC);
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u2", "u2"}).ok());
  EXPECT_EQ(probes(kC), c_before)
      << "c, still down, was probed on u2's path (a real engine that does not answer holds the "
         "probe for the whole probe timeout); events of c: "
      << ::testing::PrintToString(engine(kC).events());
  std::vector<EngineOutcome> outcomes;
  SendBucket(*group, "u2", "xy");
  (void)group->FinishUpdate(UpdateInfo{"u2", "u2"}, absl::InfiniteFuture(), &outcomes);
}

// An engine whose health answers but whose probe fails (SGLang: another tp_size) would make every
// update disband and form the group again: after one failed try it backs off.
TEST_F(QuorumTest, AnEngineHealthyButFailingItsProbeCostsOneFormationNotOnePerUpdate) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kC).FailNextProbe(
      absl::FailedPreconditionError("runs tp_size 2 but the group declares 1"));
  ASSERT_TRUE(group->Form().ok());
  const int formed = log_->formed, disbanded = log_->disbanded;
  ASSERT_TRUE(HeardAgain(*group, kC)) << "its health answers";
  for (const char* id : {"u1", "u2", "u3"}) {
    engine(kC).FailNextProbe(
        absl::FailedPreconditionError("runs tp_size 2 but the group declares 1"));
    Update(*group, id);
  }
  EXPECT_EQ(log_->formed, formed + 1) << "one try, then its back-off";
  EXPECT_EQ(log_->disbanded, disbanded + 1);
  EXPECT_THAT(group->Snapshot().needs_full_version.at(kC), HasSubstr("tried again in"));
}

// The background check waits its interval, also one under a second.
TEST_F(QuorumTest, TheBackgroundCheckWaitsItsIntervalAlsoUnderASecond) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  engine(kC).FailCalls("probe", absl::UnavailableError("down"));
  ASSERT_TRUE(group->Form().ok());
  const int before = engine(kC).health_checks();
  absl::SleepFor(absl::Milliseconds(200));
  const int checks = engine(kC).health_checks() - before;
  EXPECT_LE(checks, 20) << "interval 20ms over 200ms: about 10 checks expected, got " << checks;
}

// A commit short of the quorum must not leave the group serving two versions: a committed v1 (and
// a real adapter's commit resumes it), c was set aside before any bucket and serves v0 again; a
// is paused and named.
TEST_F(QuorumTest, ACommitShortOfTheQuorumPausesTheEngineThatCommitted) {
  auto group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  engine(kC).FailCalls("begin", absl::InternalError("begin refused"));
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  SendBucket(*group, "u1", "abc");
  engine(kB).FailCalls("finish", absl::InternalError("answered HTTP 500"));
  std::vector<EngineOutcome> outcomes;
  EXPECT_FALSE(group->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &outcomes).ok());
  const GroupSnapshot snap = group->Snapshot();
  const bool a_serves_v1 =
      engine(kA).events().back() == "finish u1 v1" && snap.needs_full_version.count(kA) == 0;
  const bool c_serves_v0 = engine(kC).events().back() == "resume";
  EXPECT_FALSE(a_serves_v1 && c_serves_v0)
      << "group last_version='" << snap.last_version << "'; a events "
      << ::testing::PrintToString(engine(kA).events()) << " a outcome needs_full='"
      << outcomes[0].needs_full_version << "'; c events "
      << ::testing::PrintToString(engine(kC).events());
}

TEST(QuorumSpec, AQuorumAboveTheEngineCountIsRefused) {
  GroupSpec spec = FakeGroupSpec("policy", {kA, kB});
  spec.quorum = 3;
  absl::Status s = ValidateGroupSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("a quorum of 3 engines is more than its 2"));
  spec.quorum = 2;
  EXPECT_TRUE(ValidateGroupSpec(spec).ok());
}

}  // namespace
}  // namespace wsync
