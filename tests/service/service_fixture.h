#ifndef WSYNC_TESTS_SERVICE_SERVICE_FIXTURE_H_
#define WSYNC_TESTS_SERVICE_SERVICE_FIXTURE_H_

// A whole host-mode daemon in the test process, reached through gRPC's in-process channel, with
// SGLang simulator processes on loopback as its engines.

#include <httplib.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "client/cpp/update_stream.h"
#include "common/checksum.h"
#include "daemon/core/daemon_core.h"
#include "daemon/group_factories.h"
#include "daemon/service/server.h"
#include "gtest/gtest.h"
#include "tests/engines/sglang/sglang_engine_process.h"
#include "tests/service/recording_platform.h"

namespace wsync {

struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// Mixed dtypes, odd sizes, about 2.3 MiB: several buckets with 1 MiB slots.
inline std::vector<OwnedTensor> SmallModel(uint32_t version) {
  std::vector<OwnedTensor> out;
  auto add = [&](std::string name, DType dtype, std::vector<int64_t> shape) {
    uint64_t n = DTypeSize(dtype);
    for (int64_t d : shape) n *= d;
    OwnedTensor t{std::move(name), dtype, std::move(shape), std::vector<uint8_t>(n)};
    for (uint64_t i = 0; i < n; ++i)
      t.data[i] = static_cast<uint8_t>(i * 31 + version * 7 + out.size());
    out.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", DType::kBfloat16, {600, 512});  // 600 KiB
  add("model.layers.0.self_attn.q_proj.bias", DType::kBfloat16, {257});
  add("model.layers.0.input_layernorm.weight", DType::kFloat32, {512});
  add("model.layers.0.mlp.up_proj.weight", DType::kBfloat16, {700, 512});
  add("model.layers.0.step", DType::kInt64, {3});
  add("model.layers.0.mlp.down_proj.weight", DType::kBfloat16, {512, 700});
  add("lm_head.weight", DType::kBfloat16, {400, 512});
  return out;
}

inline v1::TensorSpec Spec(const std::string& name, const std::string& dtype,
                           std::vector<int64_t> shape, uint64_t offset, uint64_t length) {
  v1::TensorSpec t;
  t.set_name(name);
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_offset(offset);
  t.set_length(length);
  return t;
}

inline std::vector<TensorRef> Refs(const std::vector<OwnedTensor>& ts) {
  std::vector<TensorRef> refs;
  for (const auto& t : ts) refs.push_back({t.name, t.dtype, t.shape, t.data.data(), t.data.size()});
  return refs;
}

// One raw update of session `session_id` carrying one hand-made bucket; returns the stream's final
// status.
inline absl::Status SendRawBucketAs(v1::Trainer::Stub* trainer, const std::string& session_id,
                                    const v1::Bucket& bucket, bool commit_first = false,
                                    const std::string& group = "policy") {
  UpdateStream stream(trainer, absl::Seconds(30));
  auto started = stream.Begin(session_id, group, "bad");
  if (!started.ok()) return started.status();
  // Reads and writes on separate threads, as any bidi client must: the daemon's result may be
  // sent while the client is still writing.
  std::thread writer([&] {
    if (commit_first) {
      v1::UpdateRequest commit;
      commit.mutable_commit();
      stream.Send(commit);
    }
    stream.SendBucket(bucket);
    stream.Commit();
  });
  v1::UpdateEvent e;
  while (stream.Next(&e)) {
  }
  writer.join();
  return stream.Finish();
}

// The same from the client's session.
inline absl::Status SendRawBucket(Client& client, const v1::Bucket& bucket,
                                  bool commit_first = false, const std::string& group = "policy") {
  return SendRawBucketAs(client.trainer(), client.session_id(), bucket, commit_first, group);
}

class ServiceFixture : public ::testing::Test {
 protected:
  static constexpr uint64_t kSlotBytes = 1 << 20;

  void SetUp() override {
    sim_a_ = StartSim(1);
    sim_b_ = StartSim(2);
    DaemonOptions options;
    options.mode = "host";
    options.slot_bytes = kSlotBytes;
    options.slots_per_device = 2;
    options.bucket_timeout = absl::Seconds(3);
    options.group.transport.bind_address = "127.0.0.1";
    options.group.transport.advertise_address = "127.0.0.1";
    options.group.transport.registration_timeout = absl::Seconds(5);
    options.group.timeouts.control = absl::Seconds(5);
    Configure(options);
    core_ = std::make_unique<DaemonCore>(std::make_unique<RecordingPlatform>(&broadcasts_), options,
                                         DefaultGroupFactories());
    auto server = DaemonServer::Start(core_.get(), ServerOptions{});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Client::FromChannel(server_->InProcessChannel());
    ASSERT_TRUE(client_->OpenSession(0, "service test").ok());
  }

  virtual void Configure(DaemonOptions& options) {}

  void TearDown() override {
    client_.reset();
    server_.reset();
    core_.reset();
  }

  struct RunningSim {
    std::unique_ptr<SglangEngineProcess> sim;
    std::string url;
  };

  // A simulator with `tp` ranks and its flags (tests/engines/sglang/sglang_engine.py), on `port`
  // (0: a free one).
  RunningSim StartSim(int tp, const std::vector<std::string>& flags = {}, int port = 0) {
    const std::string log = absl::StrCat(::testing::TempDir(), "/sglang-engine-", ::getpid(), "-",
                                         sims_started_++, ".log");
    auto sim = SglangEngineProcess::Start(tp, flags, log, port);
    EXPECT_TRUE(sim.ok()) << sim.status();
    if (!sim.ok()) return RunningSim{};
    std::string url = (*sim)->url();
    return RunningSim{std::move(*sim), url};
  }

  grpc::Status CreateGroup(const std::string& name, const std::vector<std::string>& urls,
                           const std::vector<uint32_t>& ranks, v1::GroupInfo* info,
                           const std::string& load_format = "") {
    v1::CreateGroupRequest req;
    v1::GroupSpec* spec = req.mutable_spec();
    spec->set_name(name);
    spec->set_kind(v1::ENGINE_KIND_SGLANG);
    if (load_format == "per_tensor") {
      spec->mutable_sglang()->set_load_format(v1::SGLANG_LOAD_FORMAT_PER_TENSOR);
    }
    for (size_t i = 0; i < urls.size(); ++i) {
      auto* e = spec->add_engines();
      e->set_url(urls[i]);
      e->set_ranks(ranks[i]);
    }
    grpc::ClientContext ctx;
    return client_->admin()->CreateGroup(&ctx, req, info);
  }

  void CreatePolicyGroup(const std::string& load_format = "") {
    v1::GroupInfo info;
    grpc::Status s = CreateGroup("policy", {sim_a_.url, sim_b_.url}, {1, 2}, &info, load_format);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(info.state(), v1::GROUP_STATE_READY);
    ASSERT_EQ(info.world_size(), 4u);
  }

  v1::GroupInfo GetGroup(const std::string& name) {
    v1::GetGroupRequest req;
    req.set_name(name);
    v1::GroupInfo info;
    grpc::ClientContext ctx;
    EXPECT_TRUE(client_->admin()->GetGroup(&ctx, req, &info).ok());
    return info;
  }

  std::vector<v1::UpdateRecord> Updates() {
    v1::ListUpdatesRequest req;
    req.set_limit(100);
    v1::ListUpdatesResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(client_->admin()->ListUpdates(&ctx, req, &resp).ok());
    return {resp.updates().begin(), resp.updates().end()};
  }

  // Every rank of the simulator holds exactly these tensors and the version.
  static void ExpectHolds(const SglangEngineProcess& sim, const std::vector<OwnedTensor>& ts,
                          const std::string& version, int ranks, bool only_these = true) {
    nlohmann::json j = sim.Checksums();
    EXPECT_EQ(j["weight_version"], version);
    ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(ranks));
    for (auto& [rank, tensors] : j["ranks"].items()) {
      if (only_these) {
        EXPECT_EQ(tensors.size(), ts.size()) << "rank " << rank;
      }
      for (const auto& t : ts) {
        ASSERT_TRUE(tensors.contains(t.name)) << "rank " << rank << " lacks " << t.name;
        EXPECT_EQ(tensors[t.name], Crc32Hex(Crc32(t.data.data(), t.data.size())))
            << "rank " << rank << " " << t.name;
      }
    }
  }

  // Pushes `model` to group "policy"; every rank of both simulators must then hold it.
  void PushAndExpectHeld(const std::string& version, const std::vector<OwnedTensor>& model) {
    auto result = client_->Push("policy", version, Refs(model));
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectHolds(*sim_a_.sim, model, version, 1);
    ExpectHolds(*sim_b_.sim, model, version, 2);
  }

  void SetKnobs(const RunningSim& sim, const std::string& json) {
    httplib::Client http(sim.url);
    auto r = http.Post("/sim/knobs", json, "application/json");
    ASSERT_TRUE(r && r->status == 200);
  }

  int TotalUpdatesReceived() {
    return sim_a_.sim->updates_received() + sim_b_.sim->updates_received();
  }

  int sims_started_ = 0;
  RunningSim sim_a_, sim_b_;
  BroadcastLog broadcasts_;  // every broadcast the daemon handed to its communicators
  std::unique_ptr<DaemonCore> core_;
  std::unique_ptr<DaemonServer> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SERVICE_SERVICE_FIXTURE_H_
