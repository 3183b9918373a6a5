#ifndef WSYNC_TESTS_FAKES_FAKE_TRANSPORT_H_
#define WSYNC_TESTS_FAKES_FAKE_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/transport.h"
#include "tests/fakes/fake_adapter.h"

namespace wsync {

// When a fake bucket's sources may be reused: once copied to the engines (as a broadcast frees a
// slot once its bytes left rank 0), or only once the engines answered (as engines reading
// wsyncd's memory through CUDA IPC need).
enum class FakeReuse { kOnceCopied, kOnceAnswered };

struct FakeTransportOptions {
  FakeReuse reuse = FakeReuse::kOnceCopied;
};

// What the fake transports of one test did, for assertions.
struct FakeTransportLog {
  std::atomic<int> formed{0};
  std::atomic<int> disbanded{0};
  std::atomic<bool> engines_lost{false};  // CheckFormed fails while set
  // The next this many StartBucket calls refuse their bucket before sending it to any engine.
  std::atomic<int> refuse_buckets{0};
};

// A transport with no wire: StartBucket copies each source's bytes straight into every fake
// engine (one payload per source) and the engine answers in a thread of its own, when its
// FakeEngine lets it.
class FakeTransport final : public Transport {
 public:
  FakeTransport(TransportEnv env, std::shared_ptr<FakeCluster> cluster,
                FakeTransportOptions options, std::shared_ptr<FakeTransportLog> log);

  absl::Status Form() override;
  void Disband() override;
  void Release(absl::string_view why) override;
  // Records "leave-stale <name>" in each engine; an engine told to (FakeEngine::LacksDestroy)
  // answers UNIMPLEMENTED, as an engine without a destroy route.
  std::vector<absl::Status> LeaveStale(const std::string& engine_group) override;
  absl::Status CheckFormed() const override;
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::StatusOr<std::unique_ptr<BucketHandle>> StartBucket(
      const std::vector<BucketSource>& sources, const BucketManifest& manifest,
      const BucketContext& context, absl::Time deadline) override;
  void EndUpdate(absl::string_view why) override;
  uint32_t world_size() const override;
  std::string rendezvous() const override;
  std::string Describe() const override { return "fake transport"; }
  std::vector<std::string> EnginesFailedToJoin() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_to_join_;
  }

 private:
  const TransportEnv env_;
  std::shared_ptr<FakeCluster> cluster_;
  const FakeTransportOptions options_;
  std::shared_ptr<FakeTransportLog> log_;
  mutable std::mutex mu_;
  bool formed_ = false;
  bool open_ = false;
  std::vector<std::string> failed_to_join_;  // by the last Form
};

// Factories that give every group fake adapters (with `capabilities`) and fake transports.
GroupFactories FakeGroupFactories(std::shared_ptr<FakeCluster> cluster,
                                  FakeCapabilities capabilities, FakeTransportOptions options = {},
                                  std::shared_ptr<FakeTransportLog> log = nullptr);

}  // namespace wsync

#endif  // WSYNC_TESTS_FAKES_FAKE_TRANSPORT_H_
