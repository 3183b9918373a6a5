// A group's membership and what it carries over from an earlier wsyncd, each on its own: no
// fakes, no engines, no I/O (daemon/core/group_membership.h, daemon/core/group_recovery.h).

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "daemon/core/group_membership.h"
#include "daemon/core/group_recovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

GroupMembership ThreeEnginesQuorumTwo() {
  GroupMembership m("g", {"http://a", "http://b", "http://c"}, 2);
  m.set_members({0, 1, 2});
  return m;
}

TEST(GroupMembership, QuorumZeroOrAllMeansEveryEngine) {
  EXPECT_FALSE(GroupMembership("g", {"a", "b"}, 0).quorum());
  EXPECT_EQ(GroupMembership("g", {"a", "b"}, 0).needed(), 2u);
  EXPECT_FALSE(GroupMembership("g", {"a", "b"}, 2).quorum());
  EXPECT_TRUE(GroupMembership("g", {"a", "b"}, 1).quorum());
}

TEST(GroupMembership, AnEngineThatFailedToJoinBacksOffDoublingUpToTheLongest) {
  GroupMembership m = ThreeEnginesQuorumTwo();
  const absl::Time before = absl::Now();
  m.SetAside(1, absl::UnavailableError("join failed"), /*back_off=*/true);
  EXPECT_TRUE(m.BackingOff(1, before));
  EXPECT_FALSE(m.BackingOff(1, before + GroupMembership::kFirstRetry + absl::Seconds(1)));
  for (int i = 0; i < 10; ++i) m.SetAside(1, absl::UnavailableError("again"), true);
  EXPECT_TRUE(m.BackingOff(1, absl::Now() + GroupMembership::kLongestRetry - absl::Seconds(5)));
  EXPECT_FALSE(m.BackingOff(1, absl::Now() + GroupMembership::kLongestRetry + absl::Seconds(1)));
  // Set aside without a back-off: named, but tried at once.
  m.SetAside(2, absl::UnavailableError("probe failed"));
  EXPECT_FALSE(m.BackingOff(2, absl::Now()));
  ASSERT_NE(m.SetAsideWhy(2), nullptr);
  EXPECT_EQ(m.SetAsideWhy(2)->message(), "probe failed");
}

TEST(GroupMembership, RetryableLeavesOutThoseBackingOffUnlessTooFewRemain) {
  GroupMembership m = ThreeEnginesQuorumTwo();
  m.SetAside(1, absl::UnavailableError("join failed"), true);
  m.ClearSetAside();
  EXPECT_THAT(m.Retryable(), ElementsAre(0, 2));
  ASSERT_NE(m.SetAsideWhy(1), nullptr);
  EXPECT_THAT(std::string(m.SetAsideWhy(1)->message()),
              HasSubstr("it failed to join or to pause; tried again in"));
  // Two backing off leave one of the two needed: every engine is tried.
  m.SetAside(2, absl::UnavailableError("join failed"), true);
  EXPECT_THAT(m.Retryable(), ElementsAre(0, 1, 2));
}

TEST(GroupMembership, TooFewNamesEveryEngineLeftOutAndWhy) {
  GroupMembership m = ThreeEnginesQuorumTwo();
  m.SetAside(0, absl::UnavailableError("down"));
  m.SetAside(2, absl::UnavailableError("refused"));
  const absl::Status s = m.TooFew(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "group 'g' needs 2 of its 3 engines and 1 are left; without http://a: down; "
            "http://c: refused");
}

TEST(GroupMembership, TheBackgroundCheckWatchesOnlyEnginesOutsideTheFormation) {
  GroupMembership m = ThreeEnginesQuorumTwo();
  m.set_members({0, 1});
  EXPECT_THAT(m.ToWatch(absl::Now()), ElementsAre(2));
  m.Heard(2, absl::UnavailableError("still down"));
  EXPECT_THAT(m.AnsweringAgain(), IsEmpty());
  m.Heard(2, absl::OkStatus());
  EXPECT_THAT(m.AnsweringAgain(), ElementsAre("http://c"));
  // Taken back at the next update: no longer reported as answering again.
  EXPECT_THAT(m.TakeBack(absl::Now()), ElementsAre(2));
  EXPECT_THAT(m.AnsweringAgain(), IsEmpty());
}

TEST(GroupMembership, AnEngineNotHeardAgainStaysSetAsideWithWhatWasLastHeard) {
  GroupMembership m = ThreeEnginesQuorumTwo();
  m.set_members({0, 1});
  m.Heard(2, absl::UnavailableError("connection refused"));
  EXPECT_THAT(m.TakeBack(absl::Now()), IsEmpty());
  ASSERT_NE(m.SetAsideWhy(2), nullptr);
  EXPECT_EQ(m.SetAsideWhy(2)->message(), "connection refused");
  // Formed over the members: those are no longer left out; the one outside still is.
  m.SetAside(0, absl::UnavailableError("paused late"), true);
  m.Formed();
  EXPECT_EQ(m.SetAsideWhy(0), nullptr);
  EXPECT_FALSE(m.BackingOff(0, absl::Now()));
  EXPECT_NE(m.SetAsideWhy(2), nullptr);
}

TEST(GroupMembership, EnginesTheTransportDroppedAreLeftOutKeepingAnEarlierReason) {
  GroupMembership m = ThreeEnginesQuorumTwo();
  m.SetAside(0, absl::UnavailableError("first reason"));
  m.NoteDropped({{"http://a", absl::DataLossError("dropped")},
                 {"http://b", absl::DataLossError("dropped mid-bucket")}});
  EXPECT_EQ(m.SetAsideWhy(0)->message(), "first reason");
  EXPECT_EQ(m.SetAsideWhy(1)->message(), "dropped mid-bucket");
  EXPECT_EQ(m.SetAsideWhy(2), nullptr);
}

GroupRecord EarlierRecord() {
  GroupRecord r;
  r.spec.name = "g";
  r.spec.engines = {EngineSpec{"http://a"}, EngineSpec{"http://gone"}};
  r.engine_group = "g.inc1.tok";
  r.stale_engine_groups = {"g.inc0.tok"};
  r.store_port = 29501;
  r.open_update_id = "u7";
  r.open_version = "v8";
  r.last_version = "v7";
  return r;
}

TEST(GroupRecovery, EnginesLeftPausedMidUpdateWaitForAFullVersionIfStillInTheGroup) {
  GroupRecovery r("g");
  const auto needs_full = r.TakeOver(EarlierRecord(), {"http://a", "http://new"});
  EXPECT_THAT(needs_full,
              UnorderedElementsAre(Pair("http://a", HasSubstr("wsyncd stopped during update u7 "
                                                              "to version 'v8'"))));
  EXPECT_THAT(needs_full.at("http://a"), HasSubstr("and of 'v7'"));
  EXPECT_TRUE(r.after_restart());
  EXPECT_THAT(r.stale_engine_groups(), ElementsAre("g.inc0.tok", "g.inc1.tok"));
  EXPECT_THAT(r.AvoidStorePorts(), ElementsAre(29501));
}

TEST(GroupRecovery, EarlierGroupsAreAskedToBeDroppedUntilEveryEngineJoins) {
  GroupRecovery r("g");
  r.TakeOver(EarlierRecord(), {"http://a"});
  std::vector<std::string> asked;
  r.SetStaleEngines({"http://a", "http://gone"}, [&](const std::string& name) {
    asked.push_back(name);
    return std::vector<absl::Status>{absl::OkStatus(),
                                     absl::UnimplementedError("no route to drop a group")};
  });
  r.LeaveStaleGroups();
  EXPECT_THAT(asked, ElementsAre("g.inc0.tok", "g.inc1.tok"));
  // The engine that cannot drop it is named when a formation fails.
  const std::vector<std::string> notes = r.FormationNotes({}, {});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("engine http://gone has no route to drop the group"));
  // A formation of some engines keeps the names; one of every engine forgets them.
  EXPECT_FALSE(r.Formed({"http://a"}, /*everyone=*/false, /*store_port=*/0));
  EXPECT_TRUE(r.after_restart());
  EXPECT_TRUE(r.Formed({"http://a"}, /*everyone=*/true, /*store_port=*/0));
  EXPECT_FALSE(r.after_restart());
  EXPECT_THAT(r.stale_engine_groups(), IsEmpty());
  asked.clear();
  r.LeaveStaleGroups();
  EXPECT_THAT(asked, IsEmpty());
}

TEST(GroupRecovery, AnEngineThatFailsToJoinAfterARestartNeedsARestartUntilItJoins) {
  GroupRecovery r("g");
  r.TakeOver(EarlierRecord(), {"http://a", "http://b"});
  const std::vector<std::string> notes = r.FormationNotes({"http://b"}, {"http://a"});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("engine http://b failed to join after wsyncd restarted"));
  EXPECT_THAT(r.needs_restart(), ElementsAre(Pair("http://b", notes[0])));
  r.Formed({"http://a", "http://b"}, /*everyone=*/true, /*store_port=*/0);
  EXPECT_THAT(r.needs_restart(), IsEmpty());
}

TEST(GroupRecovery, ANewStorePortIsRecordedAndAvoidedNextTime) {
  GroupRecovery r("g");
  EXPECT_THAT(r.AvoidStorePorts(), IsEmpty());
  EXPECT_TRUE(r.Formed({"http://a"}, true, 40000));
  EXPECT_FALSE(r.Formed({"http://a"}, true, 40000));
  EXPECT_THAT(r.AvoidStorePorts(), ElementsAre(40000));
  GroupRecord record;
  r.Fill(&record);
  EXPECT_EQ(record.store_port, 40000);
  EXPECT_THAT(record.stale_engine_groups, IsEmpty());
}

}  // namespace
}  // namespace wsync
