// The commit rule as a table: what each engine reported, and what the group does with each. No
// fakes, no I/O (daemon/core/commit_verdict.h).

#include <string>
#include <vector>

#include "daemon/core/commit_verdict.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// One engine's facts in a letter each: C committed, R reached, W waiting, D differs; '-' none.
EngineCommitFacts Facts(const std::string& letters) {
  EngineCommitFacts f;
  for (char c : letters) {
    f.committed |= c == 'C';
    f.reached |= c == 'R';
    f.waiting |= c == 'W';
    f.differs |= c == 'D';
  }
  return f;
}

std::vector<EngineCommitFacts> Engines(std::vector<std::string> each) {
  std::vector<EngineCommitFacts> out;
  for (const std::string& letters : each) out.push_back(Facts(letters));
  return out;
}

TEST(CommitVerdict, AllOrNothingCommitsOnlyWhenEveryEngineDid) {
  CommitPlan all = PlanCommit(Engines({"CR", "CR"}), 2);
  EXPECT_TRUE(all.commit_ok);
  EXPECT_THAT(all.holding, ElementsAre(0, 1));
  EXPECT_THAT(all.missed, IsEmpty());
  EXPECT_TRUE(CommitLanded(all, /*check_failed=*/false, /*quorum=*/false, 2, false));

  // One failed: the one that committed holds a version the group did not take, the one that
  // failed may hold part of it; both stay paused, nobody resumes.
  CommitPlan one = PlanCommit(Engines({"CR", "R"}), 2);
  EXPECT_FALSE(one.commit_ok);
  EXPECT_THAT(one.partial, ElementsAre(0, 1));
  EXPECT_THAT(one.resume, IsEmpty());
  EXPECT_THAT(one.holding, IsEmpty());
  EXPECT_FALSE(CommitLanded(one, false, false, 2, false));
}

TEST(CommitVerdict, AnEngineTheFailedUpdateNeverReachedResumesUnlessItWasAlreadyWaiting) {
  CommitPlan plan = PlanCommit(Engines({"R", "-", "W"}), 3);
  EXPECT_FALSE(plan.commit_ok);
  EXPECT_THAT(plan.partial, ElementsAre(0));
  EXPECT_THAT(plan.resume, ElementsAre(1));
}

TEST(CommitVerdict, AQuorumCommitsWithoutTheEnginesThatMissedIt) {
  CommitPlan plan = PlanCommit(Engines({"CR", "R", "CR"}), 2);
  EXPECT_TRUE(plan.commit_ok);
  EXPECT_THAT(plan.holding, ElementsAre(0, 2));
  EXPECT_THAT(plan.missed, ElementsAre(1));
  EXPECT_THAT(plan.partial, IsEmpty());
  EXPECT_THAT(plan.resume, IsEmpty());
  EXPECT_TRUE(CommitLanded(plan, false, /*quorum=*/true, 2, false));
  // Below the quorum: the update did not land, and each engine it reached is partial.
  CommitPlan below = PlanCommit(Engines({"CR", "R", "R"}), 2);
  EXPECT_FALSE(below.commit_ok);
  EXPECT_THAT(below.partial, ElementsAre(0, 1, 2));
}

TEST(CommitVerdict, DifferingWeightsLandOnlyOnAQuorumThatStillAgreesWithNoneServingThem) {
  // All or nothing: any difference fails the version.
  CommitPlan strict = PlanCommit(Engines({"CR", "CRD"}), 2);
  EXPECT_TRUE(strict.commit_ok);
  EXPECT_THAT(strict.holding, ElementsAre(0));
  EXPECT_FALSE(CommitLanded(strict, /*check_failed=*/true, /*quorum=*/false, 2, false));
  // Quorum 2 of 3: two agree, the third differs and was paused.
  CommitPlan quorum = PlanCommit(Engines({"CR", "CRD", "CR"}), 2);
  EXPECT_THAT(quorum.holding, ElementsAre(0, 2));
  EXPECT_TRUE(CommitLanded(quorum, true, true, 2, /*differing_serves=*/false));
  // ... unless the one that differs could not be paused and serves them.
  EXPECT_FALSE(CommitLanded(quorum, true, true, 2, /*differing_serves=*/true));
  // ... or too few agree.
  CommitPlan few = PlanCommit(Engines({"CR", "CRD", "CRD"}), 2);
  EXPECT_FALSE(CommitLanded(few, true, true, 2, false));
}

}  // namespace
}  // namespace wsync
