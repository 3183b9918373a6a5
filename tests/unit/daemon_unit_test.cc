#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/host/host_platform.h"
#include "common/host/host_source.h"
#include "common/host/shm_slot.h"
#include "daemon/config.h"
#include "daemon/core/buffer_pool.h"
#include "daemon/core/source_table.h"
#include "daemon/core/transport_kind.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/engines/sglang/sglang_broadcast_binding.h"
#include "daemon/engines/vllm/vllm_options.h"
#include "daemon/service/group_spec_proto.h"
#include "daemon/service/status_mapping.h"
#include "daemon/state_dir.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "daemon/transport/broadcast/store_peers.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "daemon/transport/http/update_channel.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_http_server.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(StatusMapping, KeepsCodeAndMessageBothWays) {
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
                    absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDataLoss, absl::StatusCode::kNotFound}) {
    absl::Status s(code, "engine http://e:1 answered 500");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(code));
    EXPECT_EQ(g.error_message(), "engine http://e:1 answered 500");
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

BucketFormat LoadFormat(const GroupSpec& spec) {
  const auto* options = dynamic_cast<const SglangOptions*>(spec.engine_options.get());
  EXPECT_NE(options, nullptr) << "an sglang group carries SglangOptions";
  return options == nullptr ? BucketFormat::kFlattened : options->load_format();
}

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
  EXPECT_EQ(config.daemon.checksum, "crc32");
  EXPECT_TRUE(ValidateGroupSpec(config.groups[0]).ok());
}

TEST(Config, ChecksumAndLoadFormatAreChecked) {
  const std::string path = ::testing::TempDir() + "/wsyncd-formats.json";
  std::ofstream(path) << R"({"checksum": "md5"})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("checksum must be"));
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

TEST(GroupSpec, ValidationNamesTheProblem) {
  GroupSpec ok;
  ok.name = "policy";
  ok.engines = {{"http://a:1", 2}};
  ok.kind = "sglang";
  ok.transport = "broadcast";
  ok.engine_options = std::make_shared<const SglangOptions>();
  EXPECT_TRUE(ValidateGroupSpec(ok).ok());
  // Ranks that add up past 2^32 do not wrap around to a small world.
  GroupSpec wrapping = ok;
  wrapping.engines = {{"http://a:1", 1u << 31}, {"http://b:1", 1u << 31}};
  EXPECT_THAT(ValidateGroupSpec(wrapping).message(), HasSubstr("4294967297 ranks"));
  GroupSpec bad_name = ok;
  bad_name.name = "a/b";
  EXPECT_THAT(ValidateGroupSpec(bad_name).message(), HasSubstr("may only contain"));
  GroupSpec no_engines = ok;
  no_engines.engines.clear();
  EXPECT_THAT(ValidateGroupSpec(no_engines).message(), HasSubstr("names no engine"));
  GroupSpec bad_url = ok;
  bad_url.engines[0].url = "a:1";
  EXPECT_THAT(ValidateGroupSpec(bad_url).message(), HasSubstr("must start with http://"));
  // Every kind has default options now; each is made where its options are made.
  auto vllm_defaults = DefaultEngineOptions("vllm");
  ASSERT_TRUE(vllm_defaults.ok()) << vllm_defaults.status();
  EXPECT_EQ((*vllm_defaults)->kind(), "vllm");
  GroupSpec vllm = ok;
  vllm.kind = "vllm";
  EXPECT_THAT(ValidateGroupSpec(vllm).message(), HasSubstr("carries sglang options"));
  GroupSpec no_options = ok;
  no_options.engine_options = nullptr;
  EXPECT_THAT(ValidateGroupSpec(no_options).message(), HasSubstr("carries no sglang options"));
  GroupSpec huge = ok;
  huge.engines[0].ranks = 200;
  EXPECT_THAT(ValidateGroupSpec(huge).message(), HasSubstr("above 128"));
}

TEST(GroupSpec, TheIpcTransportNeedsEachRanksGpuByUuid) {
  GroupSpec ipc;
  ipc.name = "colo";
  ipc.transport = "ipc";
  ipc.engines = {
      {"http://a:1",
       2,
       {"GPU-126C071A-1253-3d49-71ab-17c686b110d5", "226c071a-1253-3d49-71ab-17c686b110d5"}}};
  ipc.kind = "sglang";
  ipc.engine_options = std::make_shared<const SglangOptions>();
  EXPECT_TRUE(ValidateGroupSpec(ipc).ok()) << ValidateGroupSpec(ipc);
  GroupSpec missing = ipc;
  missing.engines[0].gpus.pop_back();
  EXPECT_THAT(ValidateGroupSpec(missing).message(),
              HasSubstr("has 2 rank(s) but 1 GPU UUID(s); the ipc transport needs"));
  GroupSpec not_uuid = ipc;
  not_uuid.engines[0].gpus[1] = "0";
  EXPECT_THAT(ValidateGroupSpec(not_uuid).message(), HasSubstr("'0' is not a GPU UUID"));
  // The broadcast takes no GPUs, but any it is given must still be one per rank.
  GroupSpec broadcast = ipc;
  broadcast.transport = "broadcast";
  EXPECT_TRUE(ValidateGroupSpec(broadcast).ok());
  broadcast.engines[0].gpus.clear();
  EXPECT_TRUE(ValidateGroupSpec(broadcast).ok());
  EXPECT_EQ(TransportKinds().Find("ipc").value()->name(), "ipc");
  EXPECT_EQ(TransportKinds().Find("nccl").value()->name(), "broadcast");
  EXPECT_THAT(TransportKinds().Find("rdma").status().message(), HasSubstr("(broadcast, ipc)"));
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

TEST(Config, SglangOptionsSitUnderTheirKindAndUnknownKeysAreRefused) {
  const std::string path = ::testing::TempDir() + "/wsyncd-options.json";
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"load_format": "per_tensor"},
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig nested;
  ASSERT_TRUE(LoadConfigFile(path, &nested).ok());
  EXPECT_EQ(LoadFormat(nested.groups[0]), BucketFormat::kPerTensor);
  std::ofstream(path) << R"({"groups": [{"name": "g", "load_fromat": "per_tensor",
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown key \"load_fromat\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"format": "per_tensor"},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown sglang option"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "load_format": "per_tensor",
      "sglang": {"load_format": "flattened_bucket"}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("given twice"));
}

// A spec read from a config file comes back equal through the admin API's proto and the state
// directory's JSON record.
void ExpectSurvivesProtoAndJson(const GroupSpec& spec, v1::GroupSpec* proto) {
  GroupSpecToProto(spec, proto);
  auto back = GroupSpecFromProto(*proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec);
  auto again = GroupSpecFromJson(GroupSpecToJson(spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, spec);
}

TEST(Config, SglangMemoryDefaultsToKeepAndResumeSurvivesEveryPath) {
  const std::string path = ::testing::TempDir() + "/wsyncd-memory.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "transport": "ipc", "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "transport": "ipc", "sglang": {"memory": "resume"},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto memory = [](const GroupSpec& spec) {
    return dynamic_cast<const SglangOptions&>(*spec.engine_options).memory();
  };
  EXPECT_EQ(memory(config.groups[0]), SglangMemory::kKeep) << "the safe default";
  EXPECT_EQ(memory(config.groups[1]), SglangMemory::kResume);
  // The admin API and the state directory's records carry it too.
  v1::GroupSpec proto;
  ExpectSurvivesProtoAndJson(config.groups[1], &proto);
  EXPECT_EQ(proto.sglang().memory(), v1::SGLANG_MEMORY_RESUME);
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"memory": "sometimes"},
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("\"keep\" or \"resume\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy", "transport": "ipc",
      "lmdeploy": {"memory": "resume"}, "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown lmdeploy option"));
}

TEST(Config, SglangIpcRouteDefaultsToTensorAndIpcSurvivesEveryPath) {
  const std::string path = ::testing::TempDir() + "/wsyncd-route.json";
  std::ofstream(path) << R"({"ipc_socket_dir": "/run/wsync", "groups": [
      {"name": "a", "transport": "ipc", "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "transport": "ipc", "sglang": {"ipc_route": "ipc"},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  EXPECT_EQ(config.daemon.group.transport.socket_dir, "/run/wsync");
  const auto route = [](const GroupSpec& spec) {
    return dynamic_cast<const SglangOptions&>(*spec.engine_options).ipc_route();
  };
  EXPECT_EQ(route(config.groups[0]), SglangIpcRoute::kTensor) << "the default";
  EXPECT_EQ(route(config.groups[1]), SglangIpcRoute::kIpc);
  v1::GroupSpec proto;
  ExpectSurvivesProtoAndJson(config.groups[1], &proto);
  EXPECT_EQ(proto.sglang().ipc_route(), v1::SGLANG_IPC_ROUTE_IPC);
  EXPECT_FALSE(config.groups[0].engine_options->Equals(*config.groups[1].engine_options));
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"ipc_route": "zmq"},
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("\"tensor\" or \"ipc\""));
  proto.mutable_sglang()->set_ipc_route(static_cast<v1::SglangIpcRoute>(7));
  EXPECT_EQ(GroupSpecFromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Config, VllmBroadcastOptionsNameTheRendezvousAndChunkAndSurviveARecord) {
  const std::string path = ::testing::TempDir() + "/wsyncd-vllm-nccl.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "c", "kind": "vllm", "transport": "broadcast",
       "vllm": {"packed": true, "rendezvous": "unique-id", "packed_chunk_bytes": 65536},
       "engines": [{"url": "http://e:3"}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto* c = dynamic_cast<const VllmOptions*>(config.groups[0].engine_options.get());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->rendezvous(), VllmRendezvous::kUniqueId);
  EXPECT_EQ(c->packed_chunk_bytes(), 65536u);
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[0]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[0]);
  v1::GroupSpec proto;
  GroupSpecToProto(config.groups[0], &proto);
  EXPECT_EQ(proto.vllm().rendezvous(), v1::VLLM_RENDEZVOUS_UNIQUE_ID);
  EXPECT_EQ(proto.vllm().packed_chunk_bytes(), 65536u);
  for (const char* bad : {R"("rendezvous": "tcp")", R"("packed_chunk_bytes": 0)"}) {
    std::ofstream(path) << absl::StrCat(
        R"({"groups": [{"name": "g", "kind": "vllm", "transport": "broadcast", "vllm": {)", bad,
        R"(}, "engines": [{"url": "http://e:1"}]}]})");
    DaemonConfig refused;
    EXPECT_EQ(LoadConfigFile(path, &refused).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
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
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("for broadcast groups"));
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

TEST(HostPlatform, AGroupsNcclLibraryIsNamedAsNotLoadedInHostMode) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto plain = platform.CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT((*plain)->Describe(), ::testing::Not(::testing::HasSubstr("NCCL")));
  auto named = platform.CreateRootCommunicator(0, 2, "/opt/nccl/libnccl.so.2");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_THAT((*named)->Describe(),
              ::testing::HasSubstr("the group's NCCL /opt/nccl/libnccl.so.2 is not loaded in host "
                                   "mode"));
}

TEST(Config, VllmOptionsSitUnderTheirKindWithSafeDefaults) {
  const std::string path = ::testing::TempDir() + "/wsyncd-vllm.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "kind": "vllm", "transport": "ipc",
       "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "kind": "vllm", "transport": "ipc",
       "vllm": {"packed": true, "pause_mode": "abort", "wake_weights": true,
                "reset_prefix_cache": false},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto* a = dynamic_cast<const VllmOptions*>(config.groups[0].engine_options.get());
  ASSERT_NE(a, nullptr) << "a vllm group carries VllmOptions";
  EXPECT_FALSE(a->packed());
  EXPECT_EQ(a->pause_mode(), VllmPauseMode::kKeep);
  EXPECT_FALSE(a->wake_weights());
  EXPECT_TRUE(a->reset_prefix_cache());
  const auto* b = dynamic_cast<const VllmOptions*>(config.groups[1].engine_options.get());
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->packed());
  EXPECT_EQ(b->pause_mode(), VllmPauseMode::kAbort);
  EXPECT_TRUE(b->wake_weights());
  EXPECT_FALSE(b->reset_prefix_cache());
  EXPECT_EQ(b->Describe(),
            "packed, pause=abort, wake_weights, keep prefix cache, rendezvous=store");
  // Written (a group record) and read back: the same spec.
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[1]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[1]);
  DaemonConfig bad;
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "vllm", "vllm": {"pack": true},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown vllm option \"pack\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "vllm",
      "vllm": {"pause_mode": "freeze"}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown vllm pause mode"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "vllm", "vllm": {"packed": 1},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("must be true or false"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "sglang", "vllm": {},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("has \"vllm\" options"));
}

TEST(Config, LmdeployOptionsSitUnderTheirKindInTheEnginesOwnWords) {
  const std::string path = ::testing::TempDir() + "/wsyncd-lmdeploy.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "kind": "lmdeploy", "transport": "ipc",
       "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "kind": "lmdeploy", "transport": "ipc", "lmdeploy": {"load_format": "null"},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  for (const auto& [group, format] :
       {std::pair{0, BucketFormat::kFlattened}, std::pair{1, BucketFormat::kPerTensor}}) {
    const auto* options =
        dynamic_cast<const LmdeployOptions*>(config.groups[group].engine_options.get());
    ASSERT_NE(options, nullptr) << "an lmdeploy group carries LmdeployOptions";
    EXPECT_EQ(options->load_format(), format);
  }
  EXPECT_EQ(config.groups[1].engine_options->Describe(), "load_format=null");
  // Written (a group record) and read back: the same spec, in LMDeploy's words.
  const nlohmann::json written = GroupSpecToJson(config.groups[1]);
  EXPECT_EQ(written["lmdeploy"]["load_format"], "null");
  auto again = GroupSpecFromJson(written);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[1]);
  DaemonConfig bad;
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy",
      "load_format": "null", "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("load_format goes under \"lmdeploy\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy",
      "lmdeploy": {"sleep": 2}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown lmdeploy option \"sleep\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy",
      "sglang": {}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("has \"sglang\" options"));
}

TEST(GroupSpecProto, LmdeployOptionsTravelInTheirOwnMessage) {
  v1::GroupSpec proto;
  proto.set_name("colo");
  proto.set_kind(v1::ENGINE_KIND_LMDEPLOY);
  proto.set_transport(v1::TRANSPORT_IPC);
  proto.add_engines()->set_url("http://e:1");
  auto defaults = GroupSpecFromProto(proto);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->engine_options->Describe(), "load_format=flattened_bucket");
  proto.mutable_lmdeploy()->set_load_format(v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR);
  auto spec = GroupSpecFromProto(proto);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->engine_options->Describe(), "load_format=null");
  v1::GroupSpec back;
  GroupSpecToProto(*spec, &back);
  EXPECT_EQ(back.lmdeploy().load_format(), v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR);
  EXPECT_FALSE(back.has_sglang());
  // Options of another kind are refused, naming both.
  proto.set_kind(v1::ENGINE_KIND_SGLANG);
  EXPECT_THAT(GroupSpecFromProto(proto).status().message(),
              HasSubstr("is of kind sglang but carries lmdeploy options"));
}

TEST(GroupSpecProto, VllmOptionsTravelInTheirOwnMessageWithZeroAsTheDefault) {
  v1::GroupSpec proto;
  proto.set_name("colo");
  proto.set_kind(v1::ENGINE_KIND_VLLM);
  proto.set_transport(v1::TRANSPORT_IPC);
  proto.add_engines()->set_url("http://e:1");
  auto defaults = GroupSpecFromProto(proto);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->engine_options->Describe(),
            "unpacked, pause=keep, no wake, reset_prefix_cache, rendezvous=store");
  proto.mutable_vllm();  // all zero: the same defaults
  auto zero = GroupSpecFromProto(proto);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->engine_options->Equals(*defaults->engine_options));
  proto.mutable_vllm()->set_packed(true);
  proto.mutable_vllm()->set_pause_mode(v1::VLLM_PAUSE_MODE_WAIT);
  proto.mutable_vllm()->set_keep_prefix_cache(true);
  auto spec = GroupSpecFromProto(proto);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->engine_options->Describe(),
            "packed, pause=wait, no wake, keep prefix cache, rendezvous=store");
  v1::GroupSpec back;
  GroupSpecToProto(*spec, &back);
  EXPECT_TRUE(back.vllm().packed());
  EXPECT_EQ(back.vllm().pause_mode(), v1::VLLM_PAUSE_MODE_WAIT);
  EXPECT_TRUE(back.vllm().keep_prefix_cache());
  proto.set_kind(v1::ENGINE_KIND_LMDEPLOY);
  EXPECT_THAT(GroupSpecFromProto(proto).status().message(),
              HasSubstr("is of kind lmdeploy but carries vllm options"));
}

TEST(StorePeers, OnlyTheEnginesAddressesAndLocalOnesForALocalEngineGetIn) {
  auto remote =
      StorePeersFor({"http://10.123.45.67:30000", "http://10.123.45.68:30000/"}, "127.0.0.1");
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(remote->allowed, (std::set<std::string>{"10.123.45.67", "10.123.45.68"}));
  EXPECT_TRUE(remote->local_engines.empty());
  auto local = StorePeersFor({"http://127.0.0.1:30000", "http://10.123.45.67:30000"}, "127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->allowed.count("127.0.0.1"), 1u);
  EXPECT_EQ(local->allowed.count("::1"), 1u);
  EXPECT_EQ(local->local_engines, std::vector<std::string>{"http://127.0.0.1:30000"});
  EXPECT_EQ(local->local_ips.count("127.0.0.1"), 1u);
  EXPECT_EQ(StorePeersFor({"https://10.0.0.1:1"}, "127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StorePeersFor({"http://no-such-host.invalid:1"}, "127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
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
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown key \"engine_network\""));
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

// A service that is no engine: what it answers must never reach whoever pointed a group at it.
class NotAnEngine : public ::testing::Test {
 protected:
  static constexpr char kSecret[] = "internal-secret-7f3a";
  void SetUp() override {
    auto reply = [](int status, std::string body, std::string type = "text/plain") {
      return [=](const SimHttpRequest&, SimHttpResponse& res) {
        res.status = status;
        res.set_content(body, type);
      };
    };
    const std::string secret_json =
        absl::StrCat(R"({"success": false, "message": ")", kSecret, R"("})");
    server_.Get("/get_server_info", reply(200, kSecret));
    server_.Post("/init_weights_update_group", reply(400, secret_json, "application/json"));
    server_.Post("/pause_generation", reply(500, kSecret));
    server_.Post("/continue_generation", reply(403, kSecret));
    server_.Post("/update_weight_version", reply(200, R"({"success": true})", "application/json"));
    server_.Post("/flush_cache", reply(400, kSecret));
    auto port = server_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    url_ = absl::StrCat("http://127.0.0.1:", *port);
  }
  SglangAdapter Adapter() {
    return SglangAdapter(EngineEndpoint{url_, 1, 1},
                         AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                         SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  }
  static void ExpectNamedNotEchoed(const absl::Status& s, const std::string& route, int status) {
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(route));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("HTTP ", status)));
    EXPECT_THAT(s.message(), ::testing::Not(HasSubstr(kSecret))) << s;
  }
  SimHttpServer server_;
  std::string url_;
};

TEST_F(NotAnEngine, ErrorsNameTheEngineRouteAndStatusButNeverItsAnswer) {
  SglangAdapter a = Adapter();
  absl::Status probe = a.Probe();
  EXPECT_EQ(probe.code(), absl::StatusCode::kInternal);
  ExpectNamedNotEchoed(probe, url_ + "/get_server_info", 200);
  absl::Status init = BroadcastBindingOf(a).value()->InitGroup(
      Rendezvous{"127.0.0.1", 1, 2, "g", RendezvousMode::kTorchStore, ""});
  EXPECT_EQ(init.code(), absl::StatusCode::kFailedPrecondition);
  ExpectNamedNotEchoed(init, url_ + "/init_weights_update_group", 400);
  EXPECT_THAT(init.message(), HasSubstr("success=false"));
  absl::Status pause = a.PauseGeneration();
  EXPECT_EQ(pause.code(), absl::StatusCode::kInternal);
  ExpectNamedNotEchoed(pause, url_ + "/pause_generation", 500);
  absl::Status resume = a.ResumeGeneration();
  EXPECT_EQ(resume.code(), absl::StatusCode::kFailedPrecondition);
  ExpectNamedNotEchoed(resume, url_ + "/continue_generation", 403);
  ExpectNamedNotEchoed(a.FinishUpdate(UpdateInfo{"u1", "v1"}), url_ + "/flush_cache", 400);
  ExpectNamedNotEchoed(a.CheckBucketReply(HttpReply{500, kSecret, "text/plain"}),
                       url_ + "/update_weights_from_distributed", 500);
  EngineHealth health = a.Health();
  EXPECT_FALSE(health.healthy);
  EXPECT_THAT(health.error, ::testing::Not(HasSubstr(kSecret)));
}

TEST(EngineHttp, EveryWayOfNotAnsweringReadsTheSame) {
  // Closed port, a port that accepts and never answers, a port that accepts and hangs up: which
  // of these a host:port is must not be learnt from the error of a group pointed at it.
  auto closed = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(closed.ok());
  const uint16_t closed_port = *LocalPort(closed->get());
  closed->reset();
  auto silent = ListenTcp("127.0.0.1", 0);  // the kernel accepts; nobody reads
  ASSERT_TRUE(silent.ok());
  auto hangup = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(hangup.ok());
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop) {
      pollfd p{hangup->get(), POLLIN, 0};
      if (::poll(&p, 1, 20) == 1) ::close(::accept(hangup->get(), nullptr, nullptr));
    }
  });
  std::set<std::string> messages;
  for (uint16_t port : {closed_port, *LocalPort(silent->get()), *LocalPort(hangup->get())}) {
    const std::string url = absl::StrCat("http://127.0.0.1:", port);
    SglangAdapter a(EngineEndpoint{url, 1, 1},
                    AdapterTimeouts{absl::Milliseconds(300), absl::Milliseconds(300)},
                    SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
    absl::Status s = a.Probe();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    std::string message(s.message());
    messages.insert(message.replace(message.find(url), url.size(), "URL"));
  }
  stop = true;
  closer.join();
  EXPECT_THAT(messages, ::testing::ElementsAre("GET URL/get_server_info: engine unreachable"));
}

TEST(UpdateChannel, ARefusedConnectionSaysUnreachableAndNoMore) {
  auto fd = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(fd.ok());
  const uint16_t port = *LocalPort(fd->get());
  fd->reset();
  UpdateChannel refused(absl::StrCat("http://127.0.0.1:", port));
  absl::Status s = refused.Post("/update", "{}", absl::Now() + absl::Seconds(5)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "engine unreachable: cannot connect for the update requests");
}

GroupRecord ARecord(const std::string& name) {
  GroupRecord r;
  r.spec.name = name;
  r.spec.device = 1;
  r.spec.engines = {{"http://e:1", 2}, {"http://[fd00::1]:30000", 1}};
  r.spec.kind = "sglang";
  r.spec.transport = "broadcast";
  r.spec.engine_options = std::make_shared<const SglangOptions>(BucketFormat::kPerTensor);
  r.engine_group = name + ".1a2b3c4d";
  r.store_port = 41234;
  r.stale_engine_groups = {name + ".0badf00d"};
  r.open_update_id = "u3";
  r.open_version = "step-3";
  r.last_version = "step-2";
  r.needs_full_version = {{"http://e:1", "left paused"}};
  return r;
}

std::string FreshDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/wsync-state-", ::getpid(), "-", name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(StateDir, RecordsSurviveAsWrittenAndAreReplacedWhole) {
  const std::string dir = FreshDir("roundtrip");
  auto state = StateDir::Open(dir + "/nested/");
  ASSERT_TRUE(state.ok()) << state.status();
  GroupRecord policy = ARecord("policy");
  ASSERT_TRUE((*state)->Save(policy).ok());
  ASSERT_TRUE((*state)->Save(ARecord("other.group")).ok());
  policy.open_version.clear();
  policy.open_update_id.clear();
  policy.needs_full_version.clear();
  ASSERT_TRUE((*state)->Save(policy).ok());  // replaces the first
  std::vector<std::string> problems;
  std::vector<GroupRecord> loaded = (*state)->LoadAll(&problems);
  EXPECT_THAT(problems, ::testing::IsEmpty());
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0], ARecord("other.group"));
  EXPECT_EQ(loaded[1], policy);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/nested/groups/policy.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir + "/nested").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/nested/groups")) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".json") << "no temporary file is left: " << e.path();
  }
  EXPECT_EQ(files, 2);
  ASSERT_TRUE((*state)->Remove("other.group").ok());
  ASSERT_TRUE((*state)->Remove("never-saved").ok());
  EXPECT_EQ((*state)->LoadAll(&problems).size(), 1u);
}

TEST(StateDir, OneWsyncdPerDirectoryAndTheRefusalNamesTheHolder) {
  const std::string dir = FreshDir("lock");
  auto first = StateDir::Open(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StateDir::Open(dir);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("state directory ", dir, " is in use by wsyncd pid ",
                                     ::getpid(), " (it holds ", dir, "/lock)")));
  EXPECT_THAT(second.status().message(), HasSubstr("--state-dir DIR"));
  first->reset();
  // The pid a holder left stays in the file; only the lock says whether it is held.
  auto third = StateDir::Open(dir);
  EXPECT_TRUE(third.ok()) << "the lock goes with the process that held it";
}

TEST(StateDir, AnOpenDirectoryIsClosedToOthers) {
  const std::string dir = FreshDir("mode");
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms(0755));
  auto state = StateDir::Open(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(StateDir, TheDefaultIsSystemdsThenXdgsThenRootsThenTheHomes) {
  StateDirEnvironment env{.state_directory = "/var/lib/wsync:/var/lib/other",
                          .xdg_state_home = "/home/u/.state/",
                          .home = "/home/u",
                          .root = true};
  auto chosen = ChooseDefaultStateDir(env);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->path, "/var/lib/wsync") << "the first of systemd's StateDirectory= list";
  EXPECT_THAT(chosen->source, HasSubstr("$STATE_DIRECTORY"));
  env.state_directory = "relative";
  EXPECT_EQ(ChooseDefaultStateDir(env)->path, "/home/u/.state/wsync");
  env.xdg_state_home = "";
  EXPECT_EQ(ChooseDefaultStateDir(env)->path, "/var/lib/wsync");
  EXPECT_EQ(ChooseDefaultStateDir(env)->source, "root's default");
  env.root = false;
  EXPECT_EQ(ChooseDefaultStateDir(env)->path, "/home/u/.local/state/wsync");
  env.home = "";
  EXPECT_THAT(ChooseDefaultStateDir(env).status().message(),
              HasSubstr("give one with --state-dir DIR (config \"state_dir\"), or run without "
                        "one with --state-dir ''"));
}

TEST(Config, AnEmptyStateDirRunsWithoutOneAndAnAbsentOneTakesTheDefault) {
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigText("{}", "absent", &config).ok());
  EXPECT_FALSE(config.state_dir.has_value());
  ASSERT_TRUE(LoadConfigText(R"({"state_dir": ""})", "empty", &config).ok());
  EXPECT_EQ(config.state_dir, "");
  auto none = OpenStateDir(std::string());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->dir, nullptr);
  EXPECT_TRUE(none->records.empty());
}

TEST(StateDir, UnreadableRecordsAreNamedAndLeftWhereTheyAre) {
  const std::string dir = FreshDir("problems");
  auto state = StateDir::Open(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE((*state)->Save(ARecord("good")).ok());
  std::ofstream(dir + "/groups/torn.json") << "{\"format\": 1, \"group\": {";
  std::ofstream(dir + "/groups/.good.json.tmp") << "half a write";
  nlohmann::json renamed = StateDir::RecordToJson(ARecord("elsewhere"));
  std::ofstream(dir + "/groups/moved.json") << renamed.dump();
  std::vector<std::string> problems;
  std::vector<GroupRecord> loaded = (*state)->LoadAll(&problems);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].spec.name, "good");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_THAT(problems[0], HasSubstr("moved.json: holds group 'elsewhere'"));
  EXPECT_THAT(problems[1], HasSubstr("torn.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/groups/torn.json"));
}

TEST(TorchStoreRendezvous, UniqueIdKeyMatchesTheHelpersPrefixChain) {
  EXPECT_EQ(TorchStoreRendezvous::UniqueIdKey("weight_sync"), "/weight_sync/weight_sync//cuda//0");
  EXPECT_EQ(TorchStoreRendezvous::UniqueIdKey("weight_update_group").size(), 49u);
}

TEST(SglangAdapter, InitBodyHasSglangsFieldsAndRankOffset) {
  nlohmann::json body = SglangBroadcastBinding::InitGroupBody(
      Rendezvous{"10.0.0.1", 29500, 4, "policy", RendezvousMode::kTorchStore, ""}, 2);
  EXPECT_EQ(body, nlohmann::json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 2, "world_size": 4, "group_name": "policy", "backend": "nccl"})"));
}

TEST(SglangAdapter, BucketBodyListsTensorsInLayoutOrderAsAFlattenedBucket) {
  BucketManifest m{{TensorEntry{"w", DType::kBfloat16, {2, 3}, 0, 12},
                    TensorEntry{"n", DType::kFloat32, {3}, 12, 12}}};
  nlohmann::json body = SglangBroadcastBinding::BucketBody(m, "policy", BucketFormat::kFlattened);
  EXPECT_EQ(body, nlohmann::json::parse(R"({"names": ["w", "n"], "dtypes": ["bfloat16", "float32"],
      "shapes": [[2, 3], [3]], "group_name": "policy", "flush_cache": false,
      "abort_all_requests": false, "load_format": "flattened_bucket"})"));
  SglangAdapter a(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                  SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  std::vector<BroadcastPiece> pieces = *BroadcastBindingOf(a).value()->Pieces(m);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].offset, 0u);
  EXPECT_EQ(pieces[0].count, 24u);
  EXPECT_EQ(pieces[0].dtype, DType::kUint8);
}

TEST(SglangAdapter, PerTensorBucketHasNullLoadFormatAndOneTypedBroadcastPerTensor) {
  BucketManifest m{{TensorEntry{"w", DType::kBfloat16, {2, 3}, 0, 12},
                    TensorEntry{"n", DType::kFloat32, {3}, 16, 12}}};
  nlohmann::json body = SglangBroadcastBinding::BucketBody(m, "policy", BucketFormat::kPerTensor);
  EXPECT_TRUE(body["load_format"].is_null());
  EXPECT_EQ(body["names"], nlohmann::json::parse(R"(["w", "n"])"));
  SglangAdapter a(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                  SglangOptions(BucketFormat::kPerTensor), kBroadcastDataPath);
  EXPECT_TRUE(a.ValidateBucket(m).ok()) << "a gap is fine when each tensor has its own broadcast";
  std::vector<BroadcastPiece> pieces = *BroadcastBindingOf(a).value()->Pieces(m);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].offset, 0u);
  EXPECT_EQ(pieces[0].count, 6u);
  EXPECT_EQ(pieces[0].dtype, DType::kBfloat16);
  EXPECT_EQ(pieces[1].offset, 16u);
  EXPECT_EQ(pieces[1].count, 3u);
  EXPECT_EQ(pieces[1].dtype, DType::kFloat32);
  BucketManifest shorts{{TensorEntry{"s", DType::kInt16, {4}, 0, 8}}};
  EXPECT_THAT(a.ValidateBucket(shorts).message(), HasSubstr("int16"));
  SglangAdapter flat(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                     SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  EXPECT_THAT(flat.ValidateBucket(m).message(), HasSubstr("back to back"));
}

// Found by the fault matrix: a /get_server_info whose tp_size was a string threw out of Probe
// and ended wsyncd (std::terminate); a float was cast to int (undefined).
TEST(SglangAdapter, ServerInfoThatIsNotSglangsIsRefusedNotThrown) {
  const EngineEndpoint endpoint{"http://127.0.0.1:9", 2, 1};
  for (const char* info : {R"({"tp_size": "2"})", R"({"tp_size": 1e30})", R"({"tp_size": 2.0})",
                           R"({"tp_size": 2, "pp_size": [1]})", R"({"pp_size": null})"}) {
    const absl::Status s = SglangAdapter::CheckServerInfo(nlohmann::json::parse(info), endpoint);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << info;
    EXPECT_THAT(s.message(), HasSubstr("is not an integer: not an SGLang server")) << info;
  }
  EXPECT_THAT(SglangAdapter::CheckServerInfo(
                  nlohmann::json::parse(R"({"tp_size": 18446744073709551615})"), endpoint)
                  .message(),
              HasSubstr("runs tp_size 4294967296 but the group declares 2"));
  EXPECT_THAT(SglangAdapter::CheckServerInfo(nlohmann::json::parse(R"({"tp_size": 4})"), endpoint)
                  .message(),
              HasSubstr("runs tp_size 4 but the group declares 2"));
  EXPECT_THAT(SglangAdapter::CheckServerInfo(
                  nlohmann::json::parse(R"({"tp_size": 2, "pp_size": 2})"), endpoint)
                  .message(),
              HasSubstr("pp_size > 1"));
  EXPECT_TRUE(
      SglangAdapter::CheckServerInfo(
          nlohmann::json::parse(R"({"tp_size": 2, "pp_size": 1, "version": "0.5.6"})"), endpoint)
          .ok());
  EXPECT_TRUE(SglangAdapter::CheckServerInfo(nlohmann::json::object(), endpoint).ok());
}

TEST(SglangAdapter, UnreachableEngineIsUnavailableAndNamed) {
  SglangAdapter a(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                  SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  absl::Status s = a.Probe();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("http://127.0.0.1:1/get_server_info"));
  EXPECT_FALSE(a.Health().healthy);
}

TEST(SourceTable, KeepsAMappingWhileItsHandleStaysAndReplacesItWhenItChanges) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  SourceTable table(&platform, 0, "t1");
  auto first = HostSourceArena::Create("t1", 4096);
  auto second = HostSourceArena::Create("t1", 4096);
  ASSERT_TRUE(first.ok() && second.ok());
  static_cast<uint8_t*>((*first)->data())[100] = 1;
  static_cast<uint8_t*>((*second)->data())[100] = 2;
  BucketManifest m;
  m.tensors.push_back(TensorEntry{"w", DType::kUint8, {8}, 0, 8});
  auto resolve = [&](const HostSourceArena& arena, bool announce) {
    std::vector<AllocationAnnounce> a;
    if (announce) a.push_back(AllocationAnnounce{1, arena.name(), arena.bytes()});
    return table.Resolve(a, {TensorSourceRef{1, 100}}, m);
  };
  auto p1 = resolve(**first, true);
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(*static_cast<const uint8_t*>(p1->pieces[0].src), 1);
  auto p2 = resolve(**first, true);  // the same handle again: the same mapping
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->pieces[0].src, p1->pieces[0].src);
  EXPECT_EQ(table.mapped(), 1u);
  auto p3 = resolve(**second, true);  // id 1 now names another allocation
  ASSERT_TRUE(p3.ok());
  EXPECT_EQ(*static_cast<const uint8_t*>(p3->pieces[0].src), 2);
  // The first mapping stays valid for whoever still holds it.
  EXPECT_EQ(*static_cast<const uint8_t*>(p1->pieces[0].src), 1);
  auto p4 = resolve(**second, false);  // known id, no announcement
  ASSERT_TRUE(p4.ok());
  EXPECT_EQ(p4->pieces[0].src, p3->pieces[0].src);
}

TEST(BufferPool, LeasesADevicesSlotsToOneSessionAtATime) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  BufferPool pool(&platform, 2, 4096);
  auto slots = pool.Lease(0, "s1");
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ(slots->size(), 2u);
  auto second = pool.Lease(0, "s2");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("held by session s1"));
  EXPECT_TRUE(pool.Transition(0, 1, "s1", SlotState::kFilling, SlotState::kQueued).ok());
  EXPECT_THAT(pool.Transition(0, 1, "s1", SlotState::kFilling, SlotState::kQueued).message(),
              HasSubstr("wait for its SlotFree"));
  EXPECT_THAT(pool.Transition(0, 5, "s1", SlotState::kFilling, SlotState::kQueued).message(),
              HasSubstr("slot 5 is not held"));
  EXPECT_THAT(pool.Transition(0, 0, "s2", SlotState::kFilling, SlotState::kQueued).message(),
              HasSubstr("not held by session s2"));
  pool.Release(0, "s1");
  auto again = pool.Lease(0, "s2");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], (*slots)[0]) << "slots are allocated once and reused";
  EXPECT_EQ(pool.slot_count(), 2u);
}

TEST(BufferPool, ADevicesSlotsAreAlignedRegionsOfOneSegmentAndTheOversizeSlotIsItsOwn) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  constexpr uint64_t kBytes = (1 << 20) + 3;
  BufferPool pool(&platform, 3, kBytes);
  auto slots = pool.Lease(0, "s1");
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 3u);
  const uint64_t stride = SlotStride(kBytes);
  EXPECT_EQ(stride % kSlotAlignment, 0u);
  EXPECT_GE(stride, kBytes);
  for (uint32_t i = 0; i < 3; ++i) {
    SlotMemory* slot = (*slots)[i];
    EXPECT_EQ(slot->memory_handle(), (*slots)[0]->memory_handle()) << "one segment";
    EXPECT_EQ(slot->allocation_offset(), i * stride);
    EXPECT_EQ(slot->allocation_bytes(), 3 * stride);
    EXPECT_EQ(slot->bytes(), kBytes);
    EXPECT_EQ(static_cast<char*>(slot->data()),
              static_cast<char*>((*slots)[0]->data()) + i * stride);
  }
  // A client maps the segment once and sees each slot's bytes at its offset.
  std::vector<char> data(64, 'x');
  std::memcpy((*slots)[2]->data(), data.data(), data.size());
  auto mapping = ShmMapping::Open((*slots)[0]->memory_handle(), 3 * stride);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  auto mapped = ShmMappedSlot::OpenRegion(*mapping, 2 * stride, kBytes);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(std::memcmp((*mapped)->data(), data.data(), data.size()), 0);
  EXPECT_EQ(ShmMappedSlot::OpenRegion(*mapping, 3 * stride - kBytes + 1, kBytes).status().code(),
            absl::StatusCode::kOutOfRange);
  // The oversize slot is a segment of its own.
  auto oversize = pool.LeaseOversize(0, "s1", 5 << 20);
  ASSERT_TRUE(oversize.ok()) << oversize.status();
  EXPECT_NE(oversize->second->memory_handle(), (*slots)[0]->memory_handle());
  EXPECT_EQ(oversize->second->allocation_offset(), 0u);
  EXPECT_EQ(oversize->second->allocation_bytes(), oversize->second->bytes());
}

// Found by the fault matrix: a trainer that truncated a slot to part of its first page and sent
// a bucket within it (its bytes read as zeros: no fault, only a checksum mismatch) left the slot
// shrunk, and the next session could not map it.
TEST(BufferPool, EachSessionGetsItsSlotsWhole) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  BufferPool pool(&platform, 2, 1 << 20);
  auto slots = pool.Lease(0, "s1");
  ASSERT_TRUE(slots.ok());
  for (SlotMemory* slot : *slots) {
    const int fd = ::shm_open(slot->memory_handle().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 100), 0);
    ::close(fd);
  }
  pool.Release(0, "s1");
  auto next = pool.Lease(0, "s2");
  ASSERT_TRUE(next.ok());
  for (SlotMemory* slot : *next) {
    EXPECT_TRUE(slot->CheckIntact().ok());
    auto mapped = ShmMappedSlot::Open(slot->memory_handle(), slot->bytes());
    EXPECT_TRUE(mapped.ok()) << mapped.status();
  }
}

}  // namespace
}  // namespace wsync
