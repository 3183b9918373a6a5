// Zero copy on the colocated path, in host mode: the trainer's tensors lie in one shared-memory
// arena as they are sent (a flat parameter buffer), so each IPC request names that arena and the
// engine reads the bucket from it in place. The engine is tests/sim/sglang_ipc_sim.py, which
// loads buckets as SGLang's update_weights_from_tensor does and counts the allocations it maps.

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

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
  IpcSim() {
    port_ = FreePort();
    const std::string port = std::to_string(port_), gpus = HostDeviceUuid(0);
    std::vector<const char*> argv = {"/usr/bin/python3", WSYNC_IPC_SIM, "--port", port.c_str(),
                                     "--gpus",           gpus.c_str(),  nullptr};
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
  void CreateIpcGroup(const IpcSim& engine) {
    v1::CreateGroupRequest req;
    v1::GroupSpec* spec = req.mutable_spec();
    spec->set_name("colo");
    spec->set_kind(v1::ENGINE_KIND_SGLANG);
    spec->set_transport(v1::TRANSPORT_IPC);
    auto* e = spec->add_engines();
    e->set_url(engine.url());
    e->set_ranks(1);
    e->add_gpus(HostDeviceUuid(0));
    v1::GroupInfo info;
    grpc::ClientContext ctx;
    grpc::Status created = client_->admin()->CreateGroup(&ctx, req, &info);
    ASSERT_TRUE(created.ok()) << created.error_message();
  }

  // Lays `model` out back to back in a new arena from byte `start`, as a flat parameter buffer
  // holds it, and pushes it in pull mode. The arena lives until the push is done.
  absl::StatusOr<PushResult> PullPush(const std::vector<OwnedTensor>& model, uint64_t start,
                                      const std::string& version) {
    uint64_t total = start;
    for (const auto& t : model) total += t.data.size();
    auto arena = client_->NewSourceArena(total);
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
    options.pull = true;
    auto push = client_->BeginPush("colo", version, std::move(options));
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

}  // namespace
}  // namespace wsync
