// Recovery after a wsyncd crash, in the core alone (fake engines, fake transport, records in
// memory): what a group records and when, what the next wsyncd does with an earlier one's
// records, and that an engine left paused mid-update is resumed only by a complete update or an
// operator.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/host/host_platform.h"
#include "daemon/core/daemon_core.h"
#include "daemon/core/weight_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_adapter.h"
#include "tests/fakes/fake_transport.h"
#include "tests/fakes/memory_state_store.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kA[] = "http://a:1";
constexpr char kB[] = "http://b:2";

// The record a wsyncd that died during update u7 (to v2, after v1) leaves for group "policy".
GroupRecord DiedMidUpdate(const std::vector<std::string>& urls) {
  GroupRecord r;
  r.spec = FakeGroupSpec("policy", urls);
  r.engine_group = "policy";
  r.open_update_id = "u7";
  r.open_version = "v2";
  r.last_version = "v1";
  return r;
}

class RecoveryTest : public ::testing::Test {
 protected:
  std::shared_ptr<WeightGroup> MakeGroup(const std::vector<std::string>& urls,
                                         const GroupRecord* previous = nullptr) {
    auto group = WeightGroup::Create(FakeGroupSpec("policy", urls), &platform_, GroupOptions{},
                                     FakeGroupFactories(cluster_, FakeCapabilities(), {}, log_),
                                     &store_, previous);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *group : nullptr;
  }
  // One bucket of `bytes` through the group's transport, answered.
  void SendBucket(WeightGroup& group, const UpdateInfo& update) {
    auto slot = platform_.AllocateSlot(0, 4096);
    ASSERT_TRUE(slot.ok());
    std::memset((*slot)->data(), 7, 64);
    BucketManifest m;
    m.tensors.push_back(TensorEntry{"w", DType::kUint8, {64}, 0, 64});
    auto handle = group.StartBucket({BucketSource{0, slot->get(), nullptr}}, m,
                                    BucketContext{update.update_id, update.version, 0, true},
                                    absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(handle.ok()) << handle.status();
    ASSERT_TRUE((*handle)->WaitReusable().ok());
    std::vector<EngineOutcome> outcomes;
    ASSERT_TRUE((*handle)->WaitAnswered(&outcomes).ok());
  }
  bool Paused(const std::string& url) {
    bool paused = false;
    for (const std::string& e : cluster_->Engine(url)->events()) {
      if (e == "pause") paused = true;
      if (e == "resume") paused = false;
    }
    return paused;
  }

  HostPlatform platform_{"127.0.0.1", "127.0.0.1"};
  std::shared_ptr<FakeCluster> cluster_ = std::make_shared<FakeCluster>();
  std::shared_ptr<FakeTransportLog> log_ = std::make_shared<FakeTransportLog>();
  MemoryStateStore store_;
};

TEST_F(RecoveryTest, TheGroupIsRecordedBeforeItsEnginesJoinAndAnUpdateBeforeTheyPause) {
  struct Seen {
    GroupRecord record;
    int formed;
    bool paused;
  };
  std::vector<Seen> saves;
  store_.OnSave([&](const GroupRecord& r) {
    saves.push_back(Seen{r, log_->formed.load(), Paused(kA) || Paused(kB)});
  });
  auto group = MakeGroup({kA, kB});
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  ASSERT_EQ(saves.size(), 1u);
  EXPECT_EQ(saves[0].record.engine_group, "policy");
  EXPECT_EQ(saves[0].formed, 0) << "recorded before the engines are asked to init the group";
  const UpdateInfo u1{"u1", "v1"};
  ASSERT_TRUE(group->BeginUpdate(u1).ok());
  ASSERT_EQ(saves.size(), 2u);
  EXPECT_EQ(saves[1].record.open_update_id, "u1");
  EXPECT_EQ(saves[1].record.open_version, "v1");
  EXPECT_FALSE(saves[1].paused) << "recorded before any engine is paused";
  SendBucket(*group, u1);
  std::vector<EngineOutcome> finished;
  ASSERT_TRUE(group->FinishUpdate(u1, absl::InfiniteFuture(), &finished).ok());
  std::optional<GroupRecord> after = store_.Get("policy");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->open_version, "");
  EXPECT_EQ(after->last_version, "v1");
  EXPECT_THAT(after->needs_full_version, IsEmpty());
  ASSERT_TRUE(group->Destroy().ok());
  EXPECT_FALSE(store_.Get("policy").has_value()) << "a destroyed group is forgotten";
}

TEST_F(RecoveryTest, ARecordThatCannotBeWrittenStopsTheUpdateBeforeAnyEngineIsPaused) {
  auto group = MakeGroup({kA});
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  store_.FailSaves(absl::InternalError("write: No space left on device"));
  absl::Status begun = group->BeginUpdate(UpdateInfo{"u1", "v1"});
  EXPECT_EQ(begun.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(begun.message(), HasSubstr("cannot record it in the state directory"));
  EXPECT_THAT(cluster_->Engine(kA)->events(), ElementsAre("probe"));
}

TEST_F(RecoveryTest, EnginesLeftPausedMidUpdateWaitUntilACompleteUpdate) {
  const GroupRecord previous = DiedMidUpdate({kA, kB});
  auto group = MakeGroup({kA, kB}, &previous);
  ASSERT_NE(group, nullptr);
  GroupSnapshot snap = group->Snapshot();
  ASSERT_EQ(snap.needs_full_version.size(), 2u);
  EXPECT_THAT(snap.needs_full_version[kA],
              HasSubstr("wsyncd stopped during update u7 to version 'v2': the engine may hold "
                        "tensors of 'v2' and of 'v1'"));
  EXPECT_EQ(snap.last_version, "v1");
  // The earlier wsyncd's engine group is dropped before the engines are asked anything else.
  ASSERT_TRUE(group->Form().ok());
  EXPECT_THAT(cluster_->Engine(kA)->events(), ElementsAre("leave-stale policy", "probe"));
  EXPECT_THAT(cluster_->Engine(kB)->events(), ElementsAre("leave-stale policy", "probe"));
  // The next wsyncd to start would find them waiting still.
  EXPECT_EQ(store_.Get("policy")->needs_full_version.size(), 2u);
  // An update that does not complete leaves them paused.
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u8", "v3"}).ok());
  group->AbortUpdate("the trainer went away");
  EXPECT_TRUE(Paused(kA));
  EXPECT_TRUE(Paused(kB));
  EXPECT_EQ(group->Snapshot().needs_full_version.size(), 2u);
  // A complete one lands on both: they hold one version again.
  const UpdateInfo u9{"u9", "v4"};
  ASSERT_TRUE(group->BeginUpdate(u9).ok());
  SendBucket(*group, u9);
  std::vector<EngineOutcome> finished;
  ASSERT_TRUE(group->FinishUpdate(u9, absl::InfiniteFuture(), &finished).ok());
  EXPECT_THAT(group->Snapshot().needs_full_version, IsEmpty());
  EXPECT_THAT(store_.Get("policy")->needs_full_version, IsEmpty());
  EXPECT_EQ(store_.Get("policy")->last_version, "v4");
}

TEST_F(RecoveryTest, OnlyAnOperatorResumesAnEngineThatWaitsOutsideACompleteUpdate) {
  GroupRecord previous;
  previous.spec = FakeGroupSpec("policy", {kA, kB});
  previous.needs_full_version = {{kB, "left paused by an earlier wsyncd"}};
  auto group = MakeGroup({kA, kB}, &previous);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->Form().ok());
  EXPECT_THAT(cluster_->Engine(kA)->events(), ElementsAre("probe"))
      << "no engine group recorded, none to drop";
  ASSERT_TRUE(group->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  EXPECT_EQ(group->ResumeEngines("").status().code(), absl::StatusCode::kFailedPrecondition)
      << "not while an update holds the engines";
  group->AbortUpdate("aborted");
  EXPECT_FALSE(Paused(kA)) << "an engine with one version is resumed as before";
  EXPECT_TRUE(Paused(kB));
  auto resumed = group->ResumeEngines("");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(*resumed, ElementsAre(kB));
  EXPECT_FALSE(Paused(kB));
  EXPECT_THAT(store_.Get("policy")->needs_full_version, IsEmpty());
  EXPECT_THAT(group->ResumeEngines("").status().message(),
              HasSubstr("no engine of group 'policy' waits for a full version"));
  EXPECT_EQ(group->ResumeEngines("http://c:3").status().code(), absl::StatusCode::kNotFound);
  auto one = group->ResumeEngines(kA);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, ElementsAre(kA));
}

TEST_F(RecoveryTest, AnEngineThatCannotDropTheStaleGroupIsNamedWhenTheGroupCannotForm) {
  cluster_->Engine(kA)->LacksDestroy();
  cluster_->Engine(kA)->FailNextProbe(absl::FailedPreconditionError("engine a refused"));
  const GroupRecord previous = DiedMidUpdate({kA});
  auto group = MakeGroup({kA}, &previous);
  ASSERT_NE(group, nullptr);
  absl::Status formed = group->Form();
  EXPECT_FALSE(formed.ok());
  EXPECT_THAT(formed.message(),
              HasSubstr("engine http://a:1 has no route to drop the group 'policy' an earlier "
                        "wsyncd left; if it still holds it, it refuses to join: restart it"));
  EXPECT_THAT(group->Snapshot().error, HasSubstr("has no route to drop"));
}

class DaemonRecoveryTest : public ::testing::Test {
 protected:
  std::unique_ptr<DaemonCore> StartDaemon(std::vector<std::string> networks) {
    DaemonOptions options;
    options.slot_bytes = 4096;
    options.engine_networks = *NetworkAllowList::Parse(networks);
    return std::make_unique<DaemonCore>(std::make_unique<HostPlatform>("127.0.0.1", "127.0.0.1"),
                                        options, FakeGroupFactories(cluster_, FakeCapabilities()),
                                        std::make_unique<MemoryStateStore>(records_));
  }
  // Waits until every group has left "forming".
  static void WaitFormed(DaemonCore& core) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      bool forming = false;
      for (const GroupSnapshot& g : core.ListGroups()) {
        forming = forming || g.state == GroupState::kForming;
      }
      if (!forming) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "groups still forming";
  }

  std::shared_ptr<FakeCluster> cluster_ = std::make_shared<FakeCluster>();
  std::shared_ptr<MemoryStateStore::Records> records_ =
      std::make_shared<MemoryStateStore::Records>();
};

TEST_F(DaemonRecoveryTest, RecordedGroupsComeBackAndTheConfigsVersionOfAGroupWins) {
  GroupRecord policy = DiedMidUpdate({kA, kB});
  GroupRecord extra;
  extra.spec = FakeGroupSpec("extra", {"http://c:3"});
  extra.engine_group = "extra";
  extra.last_version = "v5";
  GroupRecord outside;
  outside.spec = FakeGroupSpec("outside", {"http://z:9"});
  outside.engine_group = "outside";
  auto core = StartDaemon({"a", "b", "c"});
  // The config now names engine a only for "policy".
  ASSERT_TRUE(core->Recover({FakeGroupSpec("policy", {kA})}, {policy, extra, outside}).ok());
  WaitFormed(*core);
  std::vector<GroupSnapshot> groups = core->ListGroups();
  ASSERT_EQ(groups.size(), 2u) << "a record whose engines are outside engine_networks stays out";
  EXPECT_EQ(groups[0].spec.name, "extra");
  EXPECT_EQ(groups[0].state, GroupState::kReady);
  EXPECT_EQ(groups[0].last_version, "v5");
  EXPECT_EQ(groups[1].spec.name, "policy");
  EXPECT_EQ(groups[1].state, GroupState::kReady);
  EXPECT_EQ(groups[1].spec.engines.size(), 1u);
  // Engine b left the group: it is still asked to drop the earlier group, and is not a member.
  EXPECT_THAT(cluster_->Engine(kA)->events(), ElementsAre("leave-stale policy", "probe"));
  EXPECT_THAT(cluster_->Engine(kB)->events(), ElementsAre("leave-stale policy"));
  EXPECT_THAT(cluster_->Engine("http://c:3")->events(), ElementsAre("leave-stale extra", "probe"));
  EXPECT_THAT(cluster_->Engine("http://z:9")->events(), IsEmpty());
  std::vector<EngineRow> engines = core->ListEngines();
  ASSERT_EQ(engines.size(), 2u);
  EXPECT_EQ(engines[0].needs_full_version, "");
  EXPECT_THAT(engines[1].needs_full_version, HasSubstr("update u7 to version 'v2'"));
  auto resumed = core->ResumeEngines("policy", "");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(*resumed, ElementsAre(kA));
  EXPECT_EQ(core->ResumeEngines("nope", "").status().code(), absl::StatusCode::kNotFound);
  // A configured group that cannot be declared stops the start.
  auto second = StartDaemon({"a"});
  absl::Status refused = second->Recover({FakeGroupSpec("bad", {"http://z:9"})}, {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("config group 'bad': group 'bad': engine http://z:9"));
}

TEST_F(DaemonRecoveryTest, AStoppedDaemonKeepsItsRecordsAndADestroyedGroupLosesIt) {
  {
    auto core = StartDaemon({"a", "b"});
    ASSERT_TRUE(core->CreateGroup(FakeGroupSpec("kept", {kA})).ok());
    ASSERT_TRUE(core->CreateGroup(FakeGroupSpec("dropped", {kB})).ok());
    ASSERT_TRUE(core->DestroyGroup("dropped").ok());
  }
  ASSERT_EQ(records_->size(), 1u);
  EXPECT_EQ(records_->begin()->first, "kept");
  EXPECT_EQ(records_->begin()->second.engine_group, "kept");
}

}  // namespace
}  // namespace wsync
