#include "common/log.h"

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace wsync {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SetLogFormat(LogFormat::kText);
    SetLogRepeatWindow(absl::Seconds(10));
  }
};

TEST_F(LogTest, JsonLinesCarryTheMessageAndFieldsWithNumbersAsNumbers) {
  SetLogFormat(LogFormat::kJson);
  ::testing::internal::CaptureStderr();
  LogLine(LogLevel::kWarning, "update u1 failed: \"quoted\"\n and a newline",
          {{"event", "update"}, {"bytes", uint64_t{1048576}}, {"seconds", 0.25}});
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u) << "one line, whatever the message holds";
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["msg"], "update u1 failed: \"quoted\"\n and a newline");
  EXPECT_EQ(j["event"], "update");
  EXPECT_EQ(j["bytes"], 1048576);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 0.25);
  EXPECT_TRUE(j["ts"].is_string());
}

TEST_F(LogTest, RepeatsWithinTheWindowAreHeldBackAndCountedAtTheNextShowing) {
  SetLogRepeatWindow(absl::Milliseconds(200));
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) LogLine(LogLevel::kWarning, "engine http://e:1 unreachable");
  LogLine(LogLevel::kWarning, "something else");
  absl::SleepFor(absl::Milliseconds(250));
  LogLine(LogLevel::kWarning, "engine http://e:1 unreachable");
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 3u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], ::testing::EndsWith("engine http://e:1 unreachable"));
  EXPECT_THAT(lines[1], ::testing::EndsWith("something else"));
  EXPECT_THAT(lines[2], HasSubstr("unreachable (and 4 more like it held back)"));
}

// A peer's text in a message (an engine's answer, a name) cannot forge or split a text line.
TEST_F(LogTest, TextLinesWriteControlBytesEscaped) {
  ::testing::internal::CaptureStderr();
  LogLine(LogLevel::kWarning, "refused 'w\n2026-11-27T00:00:00.000 I forged'\r\x1b[2J");
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0],
              ::testing::EndsWith("refused 'w\\x0a2026-11-27T00:00:00.000 I forged'\\x0d\\x1b[2J"));
}

TEST_F(LogTest, AZeroWindowWritesEveryLine) {
  SetLogRepeatWindow(absl::ZeroDuration());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) LogLine(LogLevel::kInfo, "same");
  EXPECT_EQ(Lines(::testing::internal::GetCapturedStderr()).size(), 3u);
}

TEST(LogFormat, ParsesItsNamesAndRefusesOthers) {
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_THAT(ParseLogFormat("xml").status().message(), HasSubstr("text, json"));
}

}  // namespace
}  // namespace wsync
