#include "daemon/core/weights_check.h"

#include "daemon/engines/weight_checker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

EngineEndpoint Engine(const std::string& url, uint32_t ranks) {
  return EngineEndpoint{url, ranks, 1};
}

TEST(WeightsCheck, EqualChecksumsAgreeAndNothingDiffers) {
  const WeightChecksums sums = {{"tp0/a", "01"}, {"tp0/b", "02"}};
  WeightsCheck check =
      CompareEngineWeights({Engine("http://a", 1), Engine("http://b", 1)}, {sums, sums});
  EXPECT_EQ(check.error, "");
  EXPECT_THAT(check.differs, ElementsAre(false, false));
  EXPECT_THAT(check.notes[0], HasSubstr("over 2 tensor(s), equal on all 2 engines of TP 1"));
  EXPECT_EQ(check.notes[0], check.notes[1]);
}

TEST(WeightsCheck, TheEngineOutsideTheMajorityDiffersNamingTheTensors) {
  const WeightChecksums good = {{"tp0/a", "01"}, {"tp0/b", "02"}, {"tp0/c", "03"}};
  WeightChecksums bad = good;
  bad["tp0/b"] = "ff";
  bad.erase("tp0/c");
  WeightsCheck check = CompareEngineWeights(
      {Engine("http://a", 1), Engine("http://b", 1), Engine("http://c", 1)}, {good, bad, good});
  EXPECT_THAT(check.differs, ElementsAre(false, true, false));
  EXPECT_THAT(check.notes[1], HasSubstr("differs from http://a in 2 tensor(s): tp0/b, tp0/c"));
  EXPECT_THAT(check.notes[0], HasSubstr("equal on 2 of 3 engines of TP 1"));
  EXPECT_THAT(check.error, HasSubstr("engine http://b checksum"));
  EXPECT_THAT(check.error, ::testing::Not(HasSubstr("engine http://a")));
}

TEST(WeightsCheck, WithoutAMajorityEveryEngineOfThatSizeDiffers) {
  const WeightChecksums a = {{"k", "1"}}, b = {{"k", "2"}};
  WeightsCheck check = CompareEngineWeights({Engine("http://a", 2), Engine("http://b", 2)}, {a, b});
  EXPECT_THAT(check.differs, ElementsAre(true, true));
  EXPECT_THAT(check.notes[0], HasSubstr("differs from http://b in 1 tensor(s): k"));
  EXPECT_THAT(check.notes[1], HasSubstr("differs from http://a"));
}

TEST(WeightsCheck, EachTpSizeIsComparedOnItsOwnAndAMissingCheckerIsOnlyNoted) {
  // TP 1 and TP 2 shard differently: their maps never match, and they are not compared.
  const WeightChecksums tp1 = {{"tp0/w", "1"}}, tp2 = {{"tp0/w", "2"}, {"tp1/w", "3"}};
  WeightsCheck check = CompareEngineWeights(
      {Engine("http://a", 1), Engine("http://b", 2), Engine("http://c", 2), Engine("http://d", 1)},
      {tp1, tp2, tp2, absl::UnimplementedError("this engine kind has no weight checker")});
  EXPECT_EQ(check.error, "");
  EXPECT_THAT(check.differs, ElementsAre(false, false, false, false));
  EXPECT_THAT(check.notes[0], HasSubstr("no other engine of TP 1 to compare"));
  EXPECT_THAT(check.notes[1], HasSubstr("equal on all 2 engines of TP 2"));
  EXPECT_EQ(check.notes[3], "not checked: this engine kind has no weight checker");
}

TEST(WeightsCheck, AnEmptyAnswerProvesNothingAndIsNotCompared) {
  WeightsCheck check = CompareEngineWeights({Engine("http://a", 1), Engine("http://b", 1)},
                                            {WeightChecksums{}, WeightChecksums{}});
  EXPECT_EQ(check.error, "");
  EXPECT_THAT(check.differs, ElementsAre(false, false));
  EXPECT_EQ(check.notes[0], "not checked: the checker listed no tensors");
}

TEST(WeightChecker, SglangRanksAreKeyedByTpRankAndAWrongShapeIsRefused) {
  auto sums =
      SglangWeightChecksums(nlohmann::json::parse(R"({"success": true, "message": "", "ranks": [
          {"checksums": {"w": "aa", "v": "bb"}, "per_gpu_checksum": "x"},
          {"checksums": {"w": "cc"}, "per_gpu_checksum": "y"}]})"),
                            "http://e");
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(*sums, (WeightChecksums{{"tp0/v", "bb"}, {"tp0/w", "aa"}, {"tp1/w", "cc"}}));
  auto engine = SglangWeightChecksums(
      nlohmann::json::parse(R"({"success": true, "per_engine_checksum": "abc"})"), "http://e");
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ(*engine, (WeightChecksums{{"engine", "abc"}}));
  for (const char* bad : {R"({"success": true})", R"({"ranks": [{"checksums": {"w": 1}}]})",
                          R"({"ranks": [7]})", R"([1, 2])"}) {
    auto refused = SglangWeightChecksums(nlohmann::json::parse(bad), "http://e");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("engine http://e answered /weights_checker"));
  }
}

TEST(WeightChecker, VllmKeysAreKeptAsVllmWritesThem) {
  auto sums = VllmWeightChecksums(
      nlohmann::json::parse(R"({"checksums": {"dp0:pp0:pcp0:tp0:ep0:w": "aa"}})"), "http://v");
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(*sums, (WeightChecksums{{"dp0:pp0:pcp0:tp0:ep0:w", "aa"}}));
  EXPECT_EQ(VllmWeightChecksums(nlohmann::json::parse(R"({"status": "reset"})"), "http://v")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace wsync
