#include "tests/fakes/fake_transport.h"

#include <condition_variable>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace wsync {
namespace {

// One fake bucket: every engine answers in its own thread.
class FakeHandle final : public BucketHandle {
 public:
  // `tickets`: the bucket's place in each engine's answer order.
  FakeHandle(std::vector<EngineAdapter*> adapters, std::vector<uint64_t> tickets, FakeReuse reuse,
             absl::Time deadline, std::function<void(const absl::Status&)> on_failed)
      : adapters_(std::move(adapters)),
        reuse_(reuse),
        on_failed_(std::move(on_failed)),
        results_(adapters_.size()),
        answered_(adapters_.size(), false),
        written_at_(absl::Now()) {
    for (size_t i = 0; i < adapters_.size(); ++i) {
      auto* fake = static_cast<FakeAdapter*>(adapters_[i]);
      threads_.emplace_back([this, i, fake, ticket = tickets[i], deadline] {
        absl::Status answer = fake->engine().Answer(ticket, deadline);
        std::lock_guard<std::mutex> lock(mu_);
        results_[i] = answer;
        answered_[i] = true;
        answered_at_ = absl::Now();
        cv_.notify_all();
      });
    }
  }
  ~FakeHandle() override {
    for (auto& t : threads_) t.join();
  }

  bool launched() const override { return true; }
  absl::StatusOr<WireTiming> WaitReusable() override {
    if (reuse_ == FakeReuse::kOnceAnswered) WaitAll();
    return WireTiming{};
  }
  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes) override {
    WaitAll();
    std::vector<std::string> errors;
    absl::Status first;
    for (size_t i = 0; i < adapters_.size(); ++i) {
      outcomes->push_back(EngineOutcome{adapters_[i]->endpoint().url, results_[i]});
      if (!results_[i].ok()) {
        errors.push_back(
            absl::StrCat("engine ", adapters_[i]->endpoint().url, ": ", results_[i].message()));
        if (first.ok()) first = results_[i];
      }
    }
    if (errors.empty()) return absl::OkStatus();
    absl::Status failed(first.code(), absl::StrJoin(errors, "; "));
    on_failed_(failed);
    return failed;
  }
  absl::Time requests_written_at() const override { return written_at_; }
  absl::Time answered_at() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return answered_at_;
  }

 private:
  void WaitAll() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      for (bool a : answered_) {
        if (!a) return false;
      }
      return true;
    });
  }

  const std::vector<EngineAdapter*> adapters_;
  const FakeReuse reuse_;
  std::function<void(const absl::Status&)> on_failed_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<absl::Status> results_;
  std::vector<bool> answered_;
  const absl::Time written_at_;
  absl::Time answered_at_ = absl::InfinitePast();
  std::vector<std::thread> threads_;
};

}  // namespace

FakeTransport::FakeTransport(TransportEnv env, std::shared_ptr<FakeCluster> cluster,
                             FakeTransportOptions options, std::shared_ptr<FakeTransportLog> log)
    : env_(std::move(env)),
      cluster_(std::move(cluster)),
      options_(options),
      log_(log ? std::move(log) : std::make_shared<FakeTransportLog>()) {}

absl::Status FakeTransport::Form() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_to_join_.clear();
  std::string why;
  for (EngineAdapter* a : env_.adapters) {
    absl::Status join = cluster_->Engine(a->endpoint().url)->CallFailure("join");
    if (join.ok()) continue;
    failed_to_join_.push_back(a->endpoint().url);
    why = std::string(join.message());
  }
  if (!failed_to_join_.empty()) {
    return absl::UnavailableError(absl::StrCat("engine(s) failed to join: ", why));
  }
  formed_ = true;
  log_->engines_lost = false;
  ++log_->formed;
  return absl::OkStatus();
}

void FakeTransport::Disband() {
  std::lock_guard<std::mutex> lock(mu_);
  formed_ = false;
  ++log_->disbanded;
}

std::vector<absl::Status> FakeTransport::LeaveStale(const std::string& engine_group) {
  std::vector<absl::Status> results;
  for (EngineAdapter* a : env_.adapters) {
    std::shared_ptr<FakeEngine> engine = cluster_->Engine(a->endpoint().url);
    engine->Record(absl::StrCat("leave-stale ", engine_group));
    results.push_back(engine->lacks_destroy()
                          ? absl::UnimplementedError("answered HTTP 404: no such route")
                          : absl::OkStatus());
  }
  return results;
}

void FakeTransport::Release(absl::string_view) {
  std::lock_guard<std::mutex> lock(mu_);
  formed_ = false;
  open_ = false;
}

absl::Status FakeTransport::CheckFormed() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (formed_ && !log_->engines_lost) return absl::OkStatus();
  return absl::FailedPreconditionError("a fake engine lost the group");
}

absl::Status FakeTransport::BeginUpdate(const UpdateInfo&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!formed_) return absl::FailedPreconditionError("fake transport not formed");
  open_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BucketHandle>> FakeTransport::StartBucket(
    const std::vector<BucketSource>& sources, const BucketManifest& manifest,
    const BucketContext& context, absl::Time deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return absl::FailedPreconditionError("no update is open on the fake transport");
  }
  int refusals = log_->refuse_buckets.load();
  while (refusals > 0 && !log_->refuse_buckets.compare_exchange_weak(refusals, refusals - 1)) {
  }
  if (refusals > 0) return absl::InvalidArgumentError("the fake transport refused the bucket");
  FakeBucket bucket;
  bucket.context = context;
  for (const TensorEntry& t : manifest.tensors) {
    bucket.names.push_back(t.name);
    bucket.dtypes.push_back(t.dtype);
  }
  for (const BucketSource& source : sources) {
    const char* base =
        static_cast<const char*>(source.base != nullptr ? source.base : source.slot->data());
    bucket.payloads.emplace_back(base, manifest.span_bytes());
  }
  std::vector<uint64_t> tickets;
  for (EngineAdapter* a : env_.adapters) {
    tickets.push_back(static_cast<FakeAdapter*>(a)->engine().AddBucket(bucket));
  }
  return std::unique_ptr<BucketHandle>(new FakeHandle(
      env_.adapters, std::move(tickets), options_.reuse, deadline, env_.on_bucket_failed));
}

void FakeTransport::EndUpdate(absl::string_view) {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
}

uint32_t FakeTransport::world_size() const {
  uint32_t world = 1;
  for (EngineAdapter* a : env_.adapters) world += a->endpoint().ranks;
  return world;
}

std::string FakeTransport::rendezvous() const {
  std::lock_guard<std::mutex> lock(mu_);
  return formed_ ? "fake" : "";
}

GroupFactories FakeGroupFactories(std::shared_ptr<FakeCluster> cluster,
                                  FakeCapabilities capabilities, FakeTransportOptions options,
                                  std::shared_ptr<FakeTransportLog> log) {
  RegisterFakeTransportKind();
  GroupFactories factories;
  factories.adapter =
      [cluster, capabilities](
          const GroupSpec&, const EngineEndpoint& endpoint,
          const AdapterTimeouts&) -> absl::StatusOr<std::unique_ptr<EngineAdapter>> {
    return std::make_unique<FakeAdapter>(endpoint, cluster->Engine(endpoint.url), capabilities);
  };
  factories.transport = [cluster, options,
                         log](TransportEnv env) -> absl::StatusOr<std::unique_ptr<Transport>> {
    return std::make_unique<FakeTransport>(std::move(env), cluster, options, log);
  };
  return factories;
}

}  // namespace wsync
