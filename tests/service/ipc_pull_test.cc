// Zero copy on the colocated path, in host mode: the trainer's tensors lie in one shared-memory
// arena as they are sent (a flat parameter buffer), so each IPC request names that arena and the
// engine reads the bucket from it in place. The engine is tests/engines/sglang/sglang_engine.py on
// host memory, which loads buckets as SGLang's update_weights_from_tensor does and counts the
// allocations it maps.

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/host/host_platform.h"
#include "common/host/host_source.h"
#include "gmock/gmock.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/service/service_fixture.h"

extern char** environ;

namespace wsync {
namespace {

// The simulator as a child process, stopped with the test.
class IpcSim {
 public:
  // One TP rank per entry of `devices`, rank i on host device devices[i].
  explicit IpcSim(std::vector<int> devices = {0}) {
    port_ = FreePort();
    std::string gpus;
    for (int d : devices) absl::StrAppend(&gpus, gpus.empty() ? "" : ",", HostDeviceUuid(d));
    const std::string port = std::to_string(port_);
    std::vector<const char*> argv = {
        "/usr/bin/python3", WSYNC_IPC_SIM, "--memory",   "host", "--port",
        port.c_str(),       "--gpus",      gpus.c_str(), nullptr};
    EXPECT_EQ(
        ::posix_spawn(&pid_, argv[0], nullptr, nullptr, const_cast<char**>(argv.data()), environ),
        0);
    httplib::Client http("127.0.0.1", port_);
    for (int i = 0; i < 200 && !http.Get("/health"); ++i) absl::SleepFor(absl::Milliseconds(50));
  }
  ~IpcSim() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  nlohmann::json State() const {
    httplib::Client http("127.0.0.1", port_);
    auto res = http.Get("/sim/checksums");
    return res ? nlohmann::json::parse(res->body) : nlohmann::json::object();
  }

 private:
  static uint16_t FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    ::close(fd);
    return ntohs(addr.sin_port);
  }
  pid_t pid_ = 0;
  uint16_t port_ = 0;
};

class IpcPullTest : public ServiceFixture {
 protected:
  // `map_once`: on SGLang's map-once route (the IPC stream), else a request per bucket.
  void CreateIpcGroup(const IpcSim& engine, std::vector<int> devices = {0}, bool map_once = false) {
    v1::CreateGroupRequest req;
    v1::GroupSpec* spec = req.mutable_spec();
    spec->set_name("colo");
    spec->set_kind_name("sglang");
    if (map_once) spec->set_engine_options_json(R"({"ipc_route": "ipc"})");
    spec->set_transport(v1::TRANSPORT_IPC);
    auto* e = spec->add_engines();
    e->set_url(engine.url());
    e->set_ranks(static_cast<uint32_t>(devices.size()));
    for (int d : devices) e->add_gpus(HostDeviceUuid(d));
    v1::GroupInfo info;
    grpc::ClientContext ctx;
    grpc::Status created = client_->admin()->CreateGroup(&ctx, req, &info);
    ASSERT_TRUE(created.ok()) << created.error_message();
  }

  // Lays `model` out back to back in a new arena from byte `start`, as a flat parameter buffer
  // holds it, and pushes it in pull mode (or, with `leave_to_group`, in the mode the group
  // prefers). The arena, of at least `arena_bytes`, lives until the push is done.
  absl::StatusOr<PushResult> PullPush(const std::vector<OwnedTensor>& model, uint64_t start,
                                      const std::string& version, Client* client = nullptr,
                                      int tp_rank = -1, uint64_t pull_bucket_bytes = 0,
                                      uint64_t arena_bytes = 0, bool leave_to_group = false) {
    if (client == nullptr) client = client_.get();
    uint64_t total = start;
    for (const auto& t : model) total += t.data.size();
    auto arena = client->NewSourceArena(std::max(total, arena_bytes));
    if (!arena.ok()) return arena.status();
    auto* base = static_cast<uint8_t*>((*arena)->data());
    std::vector<TensorRef> refs;
    uint64_t at = start;
    for (const auto& t : model) {
      std::memcpy(base + at, t.data.data(), t.data.size());
      refs.push_back({t.name, t.dtype, t.shape, base + at, t.data.size()});
      at += t.data.size();
    }
    PushOptions options;
    options.pull = !leave_to_group;
    options.pull_as_group_prefers = leave_to_group;
    options.tp_rank = tp_rank;
    options.pull_bucket_bytes = pull_bucket_bytes;
    auto push = client->BeginPush("colo", version, std::move(options));
    if (!push.ok()) return push.status();
    if (absl::Status s = (*push)->Add(refs); !s.ok()) return s;
    return (*push)->Commit();
  }
};

TEST_F(IpcPullTest, BucketsLaidOutInTheTrainersArenaAreReadThereByTheEngine) {
  IpcSim engine;
  CreateIpcGroup(engine);
  for (uint32_t v = 1; v <= 2; ++v) {
    // One dtype: a flat parameter buffer holds its tensors aligned.
    std::vector<OwnedTensor> model;
    for (const OwnedTensor& t : SmallModel(v)) {
      if (t.dtype == DType::kBfloat16) model.push_back(t);
    }
    auto result = PullPush(model, /*start=*/0, absl::StrCat("z", v));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->buckets, 3u);
    EXPECT_EQ(result->buckets_read_in_place, result->buckets) << "zero copy: no slot filled";

    nlohmann::json state = engine.State();
    EXPECT_EQ(state["weight_version"], absl::StrCat("z", v));
    for (const auto& t : model) {
      EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size())))
          << t.name;
    }
    // The engine mapped the trainer's arena once per update (one allocation, every bucket in it)
    // and never one of wsyncd's slots.
    EXPECT_EQ(state["ipc_opens"][0], v);
  }
}

TEST_F(IpcPullTest, LeftToTheGroupAColocatedPushIsPulledAndReadInPlace) {
  IpcSim engine;
  CreateIpcGroup(engine);
  std::vector<OwnedTensor> model;
  for (const OwnedTensor& t : SmallModel(6)) {
    if (t.dtype == DType::kBfloat16) model.push_back(t);
  }
  auto result = PullPush(model, 0, "g1", nullptr, -1, 0, 0, /*leave_to_group=*/true);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets_pulled, result->buckets) << "the IPC transport prefers pull mode";
  EXPECT_EQ(result->buckets_read_in_place, result->buckets);
  // Colocated trainers offload between updates: wsyncd closed its mappings as the update ended.
  auto closed = client_->ReleaseSources();
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 0u) << "nothing of the trainer's is still mapped";
  nlohmann::json state = engine.State();
  EXPECT_EQ(state["weight_version"], "g1");
  for (const auto& t : model) {
    EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size()))) << t.name;
  }
}

TEST_F(IpcPullTest, LeftToTheGroupABucketInSeveralAllocationsIsCopiedByTheTrainer) {
  // A state_dict's parameters lie in allocations of their own. wsyncd maps a colocated trainer's
  // memory anew each update (it closes its mappings as the update ends), so a bucket over several
  // allocations costs a mapping of each: the client copies it into the slot instead (with the
  // sampled checksum, which a colocated group asks for) and leaves only one-allocation buckets
  // to wsyncd.
  IpcSim engine;
  CreateIpcGroup(engine);
  std::vector<OwnedTensor> model;
  for (const OwnedTensor& t : SmallModel(4)) {
    if (t.dtype == DType::kBfloat16) model.push_back(t);
  }
  for (int v = 1; v <= 2; ++v) {
    std::vector<std::unique_ptr<HostSourceArena>> arenas;
    std::vector<TensorRef> refs;
    for (const OwnedTensor& t : model) {
      auto arena = client_->NewSourceArena(t.data.size());
      ASSERT_TRUE(arena.ok()) << arena.status();
      std::memcpy((*arena)->data(), t.data.data(), t.data.size());
      refs.push_back({t.name, t.dtype, t.shape, (*arena)->data(), t.data.size()});
      arenas.push_back(std::move(*arena));
    }
    PushOptions options;
    options.pull_as_group_prefers = true;
    auto push = client_->BeginPush("colo", absl::StrCat("s", v), std::move(options));
    ASSERT_TRUE(push.ok()) << push.status();
    ASSERT_TRUE((*push)->Add(refs).ok());
    auto result = (*push)->Commit();
    ASSERT_TRUE(result.ok()) << result.status();
    // 1 MiB slots: the embedding and the bias share a bucket (two allocations); the three other
    // matrices travel alone, each in its own allocation.
    EXPECT_EQ(result->buckets, 4u);
    EXPECT_EQ(result->buckets_pulled, 3u);
    nlohmann::json state = engine.State();
    EXPECT_EQ(state["weight_version"], absl::StrCat("s", v));
    for (const auto& t : model) {
      EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size())))
          << t.name;
    }
  }
}

TEST_F(IpcPullTest, ASampledChecksumThatDoesNotMatchTheSlotFailsTheUpdateBeforeAnyRequest) {
  IpcSim engine;
  CreateIpcGroup(engine);
  MappedSlot& slot = *client_->slot(0);
  // 64 KiB: windows at 0 and at 60 KiB (the span's last 4 KiB); bytes between are not sampled.
  std::vector<uint8_t> bytes(64 << 10);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_TRUE(slot.CopyIn(0, bytes.data(), bytes.size()).ok());
  v1::Bucket bucket;
  bucket.set_slot(0);
  *bucket.add_tensors() = Spec("w", "bfloat16", {32 << 10}, 0, bytes.size());
  bucket.set_checksum_algorithm("crc32-sampled");

  // What the trainer saw differs from the slot inside a window: refused, nothing sent.
  std::vector<uint8_t> seen = bytes;
  seen[(64 << 10) - 1] ^= 0x40;
  bucket.set_checksum(SampledCrc32(seen.data(), seen.size()));
  absl::Status refused = SendRawBucket(*client_, bucket, false, "colo");
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_THAT(std::string(refused.message()),
              testing::HasSubstr("the trainer announced crc32-sampled"));
  EXPECT_THAT(std::string(refused.message()),
              testing::HasSubstr("over 65536 bytes (8192 of them sampled); nothing was sent"));
  EXPECT_TRUE(engine.State()["ranks"]["1"].empty()) << "no request reached the engine";

  // Outside the windows a difference goes unseen: that is the check's reach, by design.
  seen = bytes;
  seen[30 << 10] ^= 0x40;
  bucket.set_checksum(SampledCrc32(seen.data(), seen.size()));
  ASSERT_EQ(bucket.checksum(), SampledCrc32(bytes.data(), bytes.size()));
  // A client that predates the sampled check sends the full CRC-32, which a colocated group takes.
  bucket.clear_checksum_algorithm();
  bucket.set_checksum(Crc32(bytes.data(), bytes.size()));
  absl::Status full = SendRawBucket(*client_, bucket, false, "colo");
  EXPECT_TRUE(full.ok()) << full;
  EXPECT_EQ(engine.State()["ranks"]["1"]["w"], Crc32Hex(Crc32(bytes.data(), bytes.size())));
}

TEST_F(IpcPullTest, LeftToTheGroupAPushOnTheMapOnceRouteIsCopiedByTheTrainer) {
  // The route maps one allocation per update; pulled buckets may lie in several (the slots and
  // the trainer's own), so a group on it prefers push mode.
  IpcSim engine;
  CreateIpcGroup(engine, {0}, /*map_once=*/true);
  std::vector<OwnedTensor> model;
  for (const OwnedTensor& t : SmallModel(8)) {
    if (t.dtype == DType::kBfloat16) model.push_back(t);
  }
  auto result = PullPush(model, 0, "m1", nullptr, -1, 0, 0, /*leave_to_group=*/true);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets_pulled, 0u);
  nlohmann::json state = engine.State();
  EXPECT_EQ(state["weight_version"], "m1");
  for (const auto& t : model) {
    EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size()))) << t.name;
  }
}

TEST_F(IpcPullTest, BucketsOfAnAllocationFarLargerThanThemAreCopiedIntoSlotsInstead) {
  // An engine maps the whole allocation a request names, request after request, and that costs
  // more the larger it is: from an allocation past 1 GiB and more than 16 times a bucket, each
  // bucket is copied into a slot, which the engine maps for less (daemon/core/read_in_place.h).
  // The arena is sparse: only the model's bytes are ever touched.
  IpcSim engine;
  CreateIpcGroup(engine);
  std::vector<OwnedTensor> model;
  for (const OwnedTensor& t : SmallModel(7)) {
    if (t.dtype == DType::kBfloat16) model.push_back(t);
  }
  auto result =
      PullPush(model, 0, "big-arena", nullptr, -1, 0, /*arena_bytes=*/(1ull << 30) + 4096);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets_pulled, result->buckets);
  EXPECT_EQ(result->buckets_read_in_place, 0u) << "every bucket through a slot";
  nlohmann::json state = engine.State();
  EXPECT_EQ(state["weight_version"], "big-arena");
  for (const auto& t : model) {
    EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size()))) << t.name;
  }
  // At 1 GiB or less the same layout is read in place.
  auto small = PullPush(model, 0, "small-arena", nullptr, -1, 0, /*arena_bytes=*/1ull << 30);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->buckets_read_in_place, small->buckets);
}

TEST_F(IpcPullTest, AMisalignedLayoutIsCopiedIntoTheSlotInstead) {
  IpcSim engine;
  CreateIpcGroup(engine);
  // One byte in: every multi-byte tensor starts off its dtype's boundary, where an engine could
  // not view it in its dtype. wsyncd copies those buckets into its (aligned) slots instead.
  auto model = SmallModel(5);
  auto result = PullPush(model, /*start=*/1, "m1");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets_pulled, result->buckets);
  EXPECT_LT(result->buckets_read_in_place, result->buckets);
  nlohmann::json state = engine.State();
  for (const auto& t : model) {
    EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size()))) << t.name;
  }
}

TEST_F(IpcPullTest, ABucketLargerThanASlotGoesInOneRequestReadInPlace) {
  IpcSim engine;
  CreateIpcGroup(engine);
  std::vector<OwnedTensor> model;
  uint64_t total = 0;
  for (const OwnedTensor& t : SmallModel(4)) {
    if (t.dtype != DType::kBfloat16) continue;
    model.push_back(t);
    total += t.data.size();
  }
  ASSERT_GT(total, 2 * kSlotBytes) << "the model must not fit one slot for this test";
  auto result = PullPush(model, 0, "big1", nullptr, -1, /*pull_bucket_bytes=*/8 * kSlotBytes);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets, 1u) << "the whole model in one request";
  EXPECT_EQ(result->buckets_read_in_place, 1u);
  nlohmann::json state = engine.State();
  EXPECT_EQ(state["weight_version"], "big1");
  for (const auto& t : model) {
    EXPECT_EQ(state["ranks"]["1"][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size()))) << t.name;
  }
  // Misaligned, the bucket could not be read in place, and no slot holds it: refused before
  // anything reaches the engine.
  const auto updates = engine.State()["updates_received"];
  auto refused = PullPush(model, 1, "big2", nullptr, -1, 8 * kSlotBytes);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(refused.status().message(), testing::HasSubstr("may exceed a slot"));
  EXPECT_EQ(engine.State()["updates_received"], updates);
  EXPECT_EQ(engine.State()["weight_version"], "big1");
}

TEST_F(IpcPullTest, TwoTrainerRanksOnTwoGpusFeedOneUpdateEachReadInPlaceOnItsGpu) {
  IpcSim engine({0, 1});
  CreateIpcGroup(engine, {0, 1});
  auto rank1 = Client::FromChannel(server_->InProcessChannel());
  ASSERT_TRUE(rank1->OpenSession(1, "trainer rank 1").ok());
  std::vector<OwnedTensor> model;
  for (const OwnedTensor& t : SmallModel(3)) {
    if (t.dtype == DType::kBfloat16) model.push_back(t);
  }
  // A rank that names the other rank's place is refused before anything starts.
  auto wrong = PullPush(model, 0, "w1", rank1.get(), /*tp_rank=*/0);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.status().message(), testing::HasSubstr("TP rank 0 begins from GPU"));

  absl::StatusOr<PushResult> results[2] = {absl::UnknownError("not run"),
                                           absl::UnknownError("not run")};
  std::thread other([&] { results[1] = PullPush(model, 0, "tp1", rank1.get(), 1); });
  results[0] = PullPush(model, 0, "tp1", nullptr, 0);
  other.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->buckets_read_in_place, r->buckets) << "each rank's arena read in place";
  }
  EXPECT_EQ(results[0]->update_id, results[1]->update_id);
  nlohmann::json state = engine.State();
  EXPECT_EQ(state["weight_version"], "tp1");
  for (const char* rank : {"1", "2"}) {
    for (const auto& t : model) {
      EXPECT_EQ(state["ranks"][rank][t.name], Crc32Hex(Crc32(t.data.data(), t.data.size())))
          << "rank " << rank << " " << t.name;
    }
  }
  // Each rank mapped one allocation: its own trainer rank's arena.
  EXPECT_EQ(state["ipc_opens"], nlohmann::json::array({1, 1}));
}

}  // namespace
}  // namespace wsync
