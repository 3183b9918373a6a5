// The wsyncd kind's options (a relay group's members): the commit timeout and the streams, each
// stream a device whose trainer rank sends buckets of its own.
#include <memory>
#include <string>

#include "daemon/core/trainer_feeds.h"
#include "daemon/engines/engine_kind.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<std::shared_ptr<const EngineOptions>> Parse(const char* text) {
  absl::StatusOr<const EngineKindPlugin*> kind = EngineKinds().Find("wsyncd");
  if (!kind.ok()) return kind.status();
  return (*kind)->ParseOptions(nlohmann::json::parse(text));
}

TEST(WsyncdOptions, StreamsMakeOneFeedPerDeviceWhoseBucketsAreTheirOwn) {
  auto options = Parse(R"({"streams": [2, 0]})");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT((*options)->stream_devices(), ElementsAre(2, 0));
  EXPECT_THAT((*options)->Describe(), HasSubstr("streams=2,0"));
  GroupSpec spec;
  spec.name = "policy";
  spec.kind = "wsyncd";
  spec.transport = "relay";
  spec.engine_options = *options;
  auto feeds = FeedsOf(spec, nullptr);
  ASSERT_TRUE(feeds.ok()) << feeds.status();
  ASSERT_EQ(feeds->size(), 2u);
  EXPECT_EQ((*feeds)[0].device, 2);
  EXPECT_EQ((*feeds)[1].device, 0);
  EXPECT_TRUE(FeedsAreStreams(spec));
  // Written back as read, and compared by them.
  auto kind = EngineKinds().Find("wsyncd");
  EXPECT_EQ((*kind)->OptionsToJson(**options)["streams"], nlohmann::json::parse("[2, 0]"));
  auto other = Parse(R"({"streams": [0, 2]})");
  EXPECT_FALSE((*options)->Equals(**other));
}

TEST(WsyncdOptions, WithoutStreamsTheGroupIsFedFromItsDevice) {
  auto options = Parse("{}");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE((*options)->stream_devices().empty());
  GroupSpec spec;
  spec.name = "policy";
  spec.kind = "wsyncd";
  spec.transport = "relay";
  spec.device = 3;
  spec.engine_options = *options;
  auto feeds = FeedsOf(spec, nullptr);
  ASSERT_TRUE(feeds.ok()) << feeds.status();
  ASSERT_EQ(feeds->size(), 1u);
  EXPECT_EQ((*feeds)[0].device, 3);
  EXPECT_FALSE(FeedsAreStreams(spec));
}

TEST(WsyncdOptions, BadStreamsAreRefusedNamingWhatWasWrong) {
  const struct {
    const char* json;
    const char* named;
  } cases[] = {
      {R"({"streams": 0})", "must be a list of device indexes"},
      {R"({"streams": ["0"]})", "not \"0\""},
      {R"({"streams": [1.5]})", "not 1.5"},
      {R"({"streams": [-1]})", "device -1 is not a device index"},
      {R"({"streams": [4096]})", "device 4096 is not a device index"},
      {R"({"streams": [1, 1]})", "names device 1 twice"},
      {R"({"stream": [1]})", "unknown wsyncd option \"stream\""},
  };
  for (const auto& c : cases) {
    auto options = Parse(c.json);
    ASSERT_FALSE(options.ok()) << c.json;
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(options.status().message()), HasSubstr(c.named)) << c.json;
  }
}

}  // namespace
}  // namespace wsync
