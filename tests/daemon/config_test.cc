#include "daemon/config.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "daemon/core/weight_group.h"
#include "daemon/service/group_spec_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/group_spec_round_trip.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(Config, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1GiB"), 1ull << 30);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("2g"), 2ull << 30);
  EXPECT_FALSE(ParseByteSize("lots").ok());
  EXPECT_THAT(ParseByteSize("3 parsecs").status().message(), HasSubstr("unknown unit"));
  // Found by the config fuzzer: a size of 2^64 bytes or more was converted to uint64_t from a
  // double, which is undefined.
  EXPECT_EQ(*ParseByteSize("16383GiB"), 16383ull << 30);
  EXPECT_THAT(ParseByteSize("17179869184GiB").status().message(), HasSubstr("too large"));
  EXPECT_THAT(ParseByteSize("99999999999999999999999999").status().message(),
              HasSubstr("too large"));
}

// Found by the config fuzzer: numbers went through json::get<T>(), which casts a float T cannot
// hold (undefined) and wraps a negative; they are now checked, with the flags' bounds.
TEST(Config, NumbersAreIntegersOrSecondsWithinTheFlagsBounds) {
  const std::string path = ::testing::TempDir() + "/wsyncd-numbers.json";
  const auto refused = [&](const std::string& text) {
    std::ofstream(path) << text;
    DaemonConfig config;
    return std::string(LoadConfigFile(path, &config).message());
  };
  EXPECT_THAT(refused(R"({"slots": 1e30})"), HasSubstr("slots must be an integer from 1 to 64"));
  EXPECT_THAT(refused(R"({"slots": 0})"), HasSubstr("slots must be an integer from 1 to 64"));
  EXPECT_THAT(refused(R"({"slots": 2.5})"), HasSubstr("slots must be an integer"));
  EXPECT_THAT(refused(R"({"slot_bytes": -1})"), HasSubstr("slot_bytes must be an integer"));
  EXPECT_THAT(refused(R"({"slot_bytes": 1e300})"), HasSubstr("slot_bytes must be an integer"));
  EXPECT_THAT(refused(R"({"bucket_timeout_s": -5})"), HasSubstr("bucket_timeout_s must be"));
  EXPECT_THAT(refused(R"({"lease_s": "60"})"), HasSubstr("lease_s must be"));
  EXPECT_THAT(refused(R"({"control_timeout_s": 0})"), HasSubstr("control_timeout_s must be"));
  EXPECT_THAT(refused(R"({"groups": [{"name": "g", "device": 1e30,
                          "engines": [{"url": "http://e:1"}]}]})"),
              HasSubstr("device must be an integer"));
  EXPECT_THAT(refused(R"({"groups": [{"name": "g", "engines": [{"url": "http://e:1",
                          "ranks": -1}]}]})"),
              HasSubstr("ranks must be an integer"));
  std::ofstream(path) << R"({"slots": 4, "slot_bytes": 4096, "lease_s": 0.5,
                            "groups": [{"name": "g", "device": 1,
                                        "engines": [{"url": "http://e:1", "ranks": 2}]}]})";
  DaemonConfig good;
  ASSERT_TRUE(LoadConfigFile(path, &good).ok());
  EXPECT_EQ(good.daemon.slots_per_device, 4u);
  EXPECT_EQ(good.daemon.slot_bytes, 4096u);
  EXPECT_EQ(good.daemon.lease, absl::Milliseconds(500));
  EXPECT_EQ(good.groups[0].device, 1);
  EXPECT_EQ(good.groups[0].engines[0].ranks, 2u);
}

TEST(Config, LoadsFlagsAndPredeclaredGroups) {
  const std::string path = ::testing::TempDir() + "/wsyncd.json";
  std::ofstream(path) << R"({
    // comments are allowed
    "socket": "/tmp/x.sock", "mode": "host", "slots": 3, "slot_bytes": "64MiB",
    "bucket_timeout_s": 7, "advertise_address": "10.1.2.3",
    "groups": [{"name": "policy", "kind": "sglang", "device": 1,
                "engines": [{"url": "http://a:1"}, {"url": "http://b:2", "ranks": 4}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  EXPECT_EQ(config.server.unix_socket, "/tmp/x.sock");
  EXPECT_EQ(config.daemon.slots_per_device, 3u);
  EXPECT_EQ(config.daemon.slot_bytes, 64ull << 20);
  EXPECT_EQ(config.daemon.bucket_timeout, absl::Seconds(7));
  EXPECT_EQ(config.daemon.group.transport.advertise_address, "10.1.2.3");
  ASSERT_EQ(config.groups.size(), 1u);
  EXPECT_EQ(config.groups[0].device, 1);
  EXPECT_EQ(config.groups[0].engines[1], (EngineSpec{"http://b:2", 4}));
  std::ofstream(path) << R"({"groups": [{"name": "x", "kind": "trt", "engines": []}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown engine kind 'trt'"));
  EXPECT_EQ(LoadConfigFile("/nonexistent.json", &bad).code(), absl::StatusCode::kNotFound);
}

TEST(Config, TheShippedExampleConfigLoads) {
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(WSYNC_SOURCE_DIR "/deploy/wsyncd.example.json", &config).ok());
  EXPECT_EQ(config.daemon.mode, "cuda");
  EXPECT_EQ(config.daemon.slot_bytes, 512ull << 20);
  ASSERT_EQ(config.groups.size(), 1u);
  EXPECT_EQ(config.groups[0].engines.size(), 2u);
  EXPECT_EQ(config.groups[0].engines[0].ranks, 4u);
  EXPECT_EQ(LoadFormat(config.groups[0]), BucketFormat::kFlattened);
  EXPECT_EQ(config.daemon.checksum, "auto");
  EXPECT_TRUE(ValidateGroupSpec(config.groups[0]).ok());
}

TEST(Config, ChecksumAndLoadFormatAreChecked) {
  const std::string path = ::testing::TempDir() + "/wsyncd-formats.json";
  std::ofstream(path) << R"({"checksum": "md5"})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("checksum must be \"auto\", \"crc32\", \"crc32-sampled\" or \"none\", "
                        "not \"md5\""));
  for (const char* kind : {"auto", "crc32", "crc32-sampled"}) {
    std::ofstream(path) << absl::StrCat(R"({"checksum": ")", kind, R"("})");
    DaemonConfig read;
    ASSERT_TRUE(LoadConfigFile(path, &read).ok()) << kind;
    EXPECT_EQ(read.daemon.checksum, kind);
  }
  std::ofstream(path) << R"({"checksum": "none", "groups": [
      {"name": "g", "load_format": "per_tensor", "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig good;
  ASSERT_TRUE(LoadConfigFile(path, &good).ok());
  EXPECT_EQ(good.daemon.checksum, "none");
  EXPECT_EQ(LoadFormat(good.groups[0]), BucketFormat::kPerTensor);
  std::ofstream(path) << R"({"groups": [{"name": "g", "load_format": "bytes",
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown bucket format 'bytes'"));
}

TEST(Config, IpcGroupsKeepTheirGpusThroughAFileAndARecord) {
  const std::string path = ::testing::TempDir() + "/wsyncd-ipc.json";
  std::ofstream(path) << R"({"groups": [{"name": "colo", "transport": "ipc",
      "engines": [{"url": "http://e:1", "ranks": 1,
                   "gpus": ["GPU-126c071a-1253-3d49-71ab-17c686b110d5"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  ASSERT_EQ(config.groups.size(), 1u);
  const GroupSpec& spec = config.groups[0];
  EXPECT_EQ(spec.transport, "ipc");
  EXPECT_THAT(spec.engines[0].gpus,
              testing::ElementsAre("GPU-126c071a-1253-3d49-71ab-17c686b110d5"));
  auto again = GroupSpecFromJson(GroupSpecToJson(spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, spec);
  std::ofstream(path) << R"({"groups": [{"name": "colo", "transport": "ipc",
      "engines": [{"url": "http://e:1", "gpus": "GPU-0"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("gpus must be a list"));
}

TEST(Config, AGroupsNcclLibraryTravelsEverywhereAndOnlyBroadcastGroupsTakeOne) {
  const std::string path = ::testing::TempDir() + "/wsyncd-nccl-lib.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "v", "kind": "vllm", "nccl_lib": "/opt/vllm/nvidia/nccl/lib/libnccl.so.2",
       "engines": [{"url": "http://e:3"}]},
      {"name": "s", "engines": [{"url": "http://e:4"}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  EXPECT_EQ(config.groups[0].nccl_library, "/opt/vllm/nvidia/nccl/lib/libnccl.so.2");
  EXPECT_EQ(config.groups[1].nccl_library, "") << "the daemon's --nccl-lib";
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[0]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[0]);
  EXPECT_FALSE(*again == config.groups[1]);
  v1::GroupSpec proto;
  GroupSpecToProto(config.groups[0], &proto);
  EXPECT_EQ(proto.nccl_library(), "/opt/vllm/nvidia/nccl/lib/libnccl.so.2");
  auto back = GroupSpecFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config.groups[0]);

  GroupSpec ipc = config.groups[1];
  ipc.transport = "ipc";
  ipc.engines[0].gpus = {"GPU-0"};
  ipc.nccl_library = "libnccl.so.2";
  absl::Status refused = ValidateGroupSpec(ipc);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("for broadcast or relay groups"));
  GroupSpec odd = config.groups[0];
  odd.nccl_library = "lib\nnccl.so";  // a control character
  EXPECT_EQ(ValidateGroupSpec(odd).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Config, AGroupsQuorumTravelsEverywhereAndIsCheckedAgainstItsEngines) {
  const std::string path = ::testing::TempDir() + "/wsyncd-quorum.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "q", "quorum": 2, "check_weights": true,
       "engines": [{"url": "http://e:3"}, {"url": "http://e:4"}, {"url": "http://e:5"}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  EXPECT_EQ(config.groups[0].quorum, 2u);
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[0]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[0]);
  v1::GroupSpec proto;
  GroupSpecToProto(config.groups[0], &proto);
  EXPECT_EQ(proto.quorum(), 2u);
  auto back = GroupSpecFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config.groups[0]);
  GroupSpec all = config.groups[0];
  all.quorum = 0;
  EXPECT_FALSE(all == config.groups[0]);

  // Checked where every spec is (the group is declared), whichever path it came by.
  GroupSpec over = config.groups[0];
  over.quorum = 4;
  EXPECT_THAT(ValidateGroupSpec(over).message(),
              ::testing::HasSubstr("a quorum of 4 engines is more than its 3"));
  for (const char* bad : {R"({"groups": [{"name": "q", "quorum": -1,
                               "engines": [{"url": "http://e:3"}]}]})",
                          R"({"groups": [{"name": "q", "quorum": "two",
                               "engines": [{"url": "http://e:3"}]}]})"}) {
    std::ofstream(path) << bad;
    DaemonConfig refused;
    EXPECT_EQ(LoadConfigFile(path, &refused).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Config, EngineNetworksAreCheckedAndAMisspeltKeyIsRefused) {
  const std::string path = ::testing::TempDir() + "/wsyncd-networks.json";
  std::ofstream(path) << R"({"engine_networks": ["10.0.0.0/8", "fd00::/8", "gpu-node-7"]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  ASSERT_TRUE(config.engine_networks.has_value());
  EXPECT_THAT(*config.engine_networks,
              ::testing::ElementsAre("10.0.0.0/8", "fd00::/8", "gpu-node-7"));
  auto list = EngineNetworksFor(config);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->Describe(), "10.0.0.0/8, fd00::/8, gpu-node-7")
      << "a list given replaces the default: loopback is not added to it";
  DaemonConfig bad;
  std::ofstream(path) << R"({"engine_networks": ["10.0.0.0/33"]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("engine_networks: '10.0.0.0/33'"));
  std::ofstream(path) << R"({"engine_networks": "10.0.0.0/8"})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("must be a list"));
  // A misspelt security setting would otherwise leave the default in force without a word.
  std::ofstream(path) << R"({"engine_network": ["0.0.0.0/0"]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("engine_network: unknown key; did you mean \"engine_networks\"?"));
}

// Each error names where in the file, in wsyncd's words: a key's path, a syntax error's line and
// column, what a value must be and what it is.
TEST(Config, EveryErrorSaysWhereInTheFile) {
  const std::string path = ::testing::TempDir() + "/wsyncd-where.json";
  const auto refused = [&](const std::string& text) {
    std::ofstream(path) << text;
    DaemonConfig config;
    absl::Status s = LoadConfigFile(path, &config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(s.message());
  };
  // An engine's misspelt key was ignored and the engine taken as 1 rank.
  EXPECT_EQ(refused(R"({"groups": [{"name": "p", "engines": [{"url": "http://e:1"},
                         {"url": "http://e:2", "rank": 4}]}]})"),
            path + ": groups[0].engines[1].rank: unknown key; did you mean \"ranks\"?");
  EXPECT_EQ(refused(R"({"groups": [{"name": "p", "engins": []}]})"),
            path + ": groups[0].engins: unknown key; did you mean \"engines\"?");
  EXPECT_THAT(refused(R"({"groups": [{"name": "p", "engines": [], "colour": 1}]})"),
              HasSubstr(": groups[0].colour: unknown key (groups[0] takes: name, kind,"));
  EXPECT_EQ(refused("{\n  \"slots\": 2,\n}\n"),
            absl::StrCat(path,
                         ":3:1: not valid JSON: syntax error while parsing object key - "
                         "unexpected '}'; expected string literal"));
  EXPECT_EQ(refused(R"({"groups": [{"engines": []}]})"),
            path + ": groups[0]: \"name\" is required");
  EXPECT_EQ(refused(R"({"groups": [{"name": "p", "engines": [{"ranks": 2}]}]})"),
            path + ": groups[0].engines[0]: \"url\" is required");
  EXPECT_EQ(refused(R"({"socket": 5})"), path + ": socket must be a string, not a number");
  EXPECT_EQ(refused(R"({"groups": [{"name": "p", "engines": [{"url": "http://e:1",
                         "gpus": ["GPU-1", 2]}]}]})"),
            path + ": groups[0].engines[0].gpus[1] must be a string, not a number");
  EXPECT_EQ(refused(R"({"groups": {"name": "p"}})"),
            path + ": groups must be a list of groups, not an object");
  EXPECT_EQ(refused(R"({"insecure_listen": "yes"})"),
            path + ": insecure_listen must be true or false, not a string");
  EXPECT_EQ(refused("[1, 2]"), path + ": the config must be an object, not a list");
  // Found by the config fuzzer: a number no JSON number type holds threw past the parser's
  // position-carrying errors.
  EXPECT_THAT(refused("99000E06156000000"),
              HasSubstr(path + ": not valid JSON: number overflow parsing '99000E06156000000'"));
}

TEST(Config, DefaultEngineNetworksAreLoopbackAndTheConfigsOwnEngineHosts) {
  const std::string path = ::testing::TempDir() + "/wsyncd-default-networks.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "engines": [{"url": "http://engine-0.internal:30000"},
                                {"url": "http://10.1.2.3:30000"}]},
      {"name": "b", "engines": [{"url": "http://[fd00::7]:30000"},
                                {"url": "http://engine-0.internal:30001"}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  EXPECT_FALSE(config.engine_networks.has_value());
  auto list = EngineNetworksFor(config);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->Describe(), "127.0.0.0/8, ::1, localhost, engine-0.internal, 10.1.2.3, fd00::7");
}

}  // namespace
}  // namespace wsync
