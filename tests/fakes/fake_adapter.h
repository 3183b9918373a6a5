#ifndef WSYNC_TESTS_FAKES_FAKE_ADAPTER_H_
#define WSYNC_TESTS_FAKES_FAKE_ADAPTER_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/engine_adapter.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// One bucket as a fake engine received it: one payload per source, in source order.
struct FakeBucket {
  BucketContext context;
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<std::string> payloads;
};

// What one fake engine saw: its lifecycle calls (from its adapter) and its buckets (from the fake
// transport). It answers its buckets one at a time in the order they came, as an engine answers
// the requests of one connection; the answers can be held back, or the next one made to fail.
class FakeEngine {
 public:
  void Record(std::string event);
  std::vector<std::string> events() const;
  // Returns the bucket's place in the answer order.
  uint64_t AddBucket(FakeBucket bucket);
  std::vector<FakeBucket> buckets() const;

  // While held, no bucket is answered.
  void HoldAnswers();
  void ReleaseAnswers();
  // Blocks until the answers before `ticket` were given and answers are not held, then returns
  // this one: OK, or the failure set by FailNextAnswer. DEADLINE_EXCEEDED at the deadline.
  absl::Status Answer(uint64_t ticket, absl::Time deadline);
  void FailNextAnswer(absl::Status status);
  // The next probe fails with `status`.
  void FailNextProbe(absl::Status status);
  absl::Status TakeProbeFailure();
  // Every call of `call` ("probe", "pause", "begin", "finish", or "join": the fake transport's
  // formation) fails with `status` until set back to OK.
  void FailCalls(const std::string& call, absl::Status status);
  absl::Status CallFailure(const std::string& call) const;
  void CountHealthCheck();
  int health_checks() const;
  // Makes the engine one without a route to drop a weight-update group (an old server).
  void LacksDestroy();
  bool lacks_destroy() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> events_;
  std::vector<FakeBucket> buckets_;
  uint64_t answered_ = 0;  // tickets answered so far
  bool held_ = false;
  bool lacks_destroy_ = false;
  int health_checks_ = 0;
  absl::Status probe_failure_;
  std::map<std::string, absl::Status> call_failures_;
  absl::Status next_failure_;
};

// The fake engines of one test, by URL.
class FakeCluster {
 public:
  std::shared_ptr<FakeEngine> Engine(const std::string& url);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<FakeEngine>> engines_;
};

// Options of no real engine; the fake groups carry them.
class FakeEngineOptions final : public EngineOptions {
 public:
  absl::string_view kind() const override { return "fake"; }
  absl::Status Validate() const override { return absl::OkStatus(); }
  bool Equals(const EngineOptions& other) const override {
    return dynamic_cast<const FakeEngineOptions*>(&other) != nullptr;
  }
  std::string Describe() const override { return "fake"; }
};

// What a fake engine can do: the one data path it has a binding of ("broadcast", "cuda-ipc"),
// and what it demands of a bucket.
struct FakeCapabilities {
  std::string data_path = "broadcast";
  BucketRules bucket_rules = {};
};

// A binding that names its path and nothing more: the fake transport calls no path's hooks.
class FakeBinding final : public DataPathBinding {
 public:
  explicit FakeBinding(std::string path) : path_(std::move(path)) {}
  absl::string_view data_path() const override { return path_; }

 private:
  const std::string path_;
};

// An adapter that records every lifecycle call in its engine and has one binding that moves
// nothing (the fake transport needs none).
class FakeAdapter final : public EngineAdapter {
 public:
  FakeAdapter(EngineEndpoint endpoint, std::shared_ptr<FakeEngine> engine,
              FakeCapabilities capabilities)
      : endpoint_(std::move(endpoint)),
        engine_(std::move(engine)),
        capabilities_(std::move(capabilities)),
        binding_(capabilities_.data_path) {}

  const EngineEndpoint& endpoint() const override { return endpoint_; }
  void SetRankOffset(uint32_t rank_offset) override { endpoint_.rank_offset = rank_offset; }
  AdapterCapabilities Capabilities() const override {
    return AdapterCapabilities{capabilities_.bucket_rules};
  }
  DataPathBinding* Binding(absl::string_view data_path) override {
    if (data_path == capabilities_.data_path) return &binding_;
    for (const auto& b : more_bindings_) {
      if (b->data_path() == data_path) return b.get();
    }
    return nullptr;
  }
  // Another path it speaks, through `binding` (a test-only engine kind's own).
  void AddBinding(std::unique_ptr<DataPathBinding> binding) {
    more_bindings_.push_back(std::move(binding));
  }
  absl::Status Probe() override;
  // Healthy unless its probes are made to fail (FailCalls("probe", ...)).
  EngineHealth Health() override {
    engine_->CountHealthCheck();
    EngineHealth health;
    health.healthy = engine_->CallFailure("probe").ok();
    if (!health.healthy) health.error = std::string(engine_->CallFailure("probe").message());
    health.engine_version = "fake";
    health.variant = "fake";
    return health;
  }
  absl::Status ValidateBucket(const BucketManifest&) const override { return absl::OkStatus(); }
  absl::Status PauseGeneration() override;
  absl::Status ResumeGeneration() override;
  void AbandonUpdate() override { engine_->Record("abandon"); }
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::Status FinishUpdate(const UpdateInfo& update) override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override;

  FakeEngine& engine() { return *engine_; }

 private:
  EngineEndpoint endpoint_;
  std::shared_ptr<FakeEngine> engine_;
  const FakeCapabilities capabilities_;
  FakeBinding binding_;
  std::vector<std::unique_ptr<DataPathBinding>> more_bindings_;
};

// Registers the "fake" transport kind (once): what the core reads of a fake group's transport.
void RegisterFakeTransportKind();

// A group spec of fake engines at `urls` (one rank each), on the "fake" transport.
GroupSpec FakeGroupSpec(const std::string& name, const std::vector<std::string>& urls);

}  // namespace wsync

#endif  // WSYNC_TESTS_FAKES_FAKE_ADAPTER_H_
