#include "tests/fakes/fake_adapter.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "daemon/core/transport_kind.h"

namespace wsync {

void FakeEngine::Record(std::string event) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(event));
}

std::vector<std::string> FakeEngine::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

uint64_t FakeEngine::AddBucket(FakeBucket bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  buckets_.push_back(std::move(bucket));
  return buckets_.size() - 1;
}

std::vector<FakeBucket> FakeEngine::buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_;
}

void FakeEngine::HoldAnswers() {
  std::lock_guard<std::mutex> lock(mu_);
  held_ = true;
}

void FakeEngine::ReleaseAnswers() {
  std::lock_guard<std::mutex> lock(mu_);
  held_ = false;
  cv_.notify_all();
}

absl::Status FakeEngine::Answer(uint64_t ticket, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool turn = cv_.wait_for(lock, absl::ToChronoNanoseconds(deadline - absl::Now()),
                                 [&] { return !held_ && answered_ == ticket; });
  if (!turn) return absl::DeadlineExceededError("the fake engine did not answer in time");
  ++answered_;
  cv_.notify_all();
  return std::exchange(next_failure_, absl::OkStatus());
}

void FakeEngine::FailNextAnswer(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  next_failure_ = std::move(status);
}

void FakeEngine::FailNextProbe(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  probe_failure_ = std::move(status);
}

absl::Status FakeEngine::TakeProbeFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(probe_failure_, absl::OkStatus());
}

void FakeEngine::FailCalls(const std::string& call, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  call_failures_[call] = std::move(status);
}

absl::Status FakeEngine::CallFailure(const std::string& call) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = call_failures_.find(call);
  return it == call_failures_.end() ? absl::OkStatus() : it->second;
}

void FakeEngine::LacksDestroy() {
  std::lock_guard<std::mutex> lock(mu_);
  lacks_destroy_ = true;
}

bool FakeEngine::lacks_destroy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lacks_destroy_;
}

std::shared_ptr<FakeEngine> FakeCluster::Engine(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& engine = engines_[url];
  if (engine == nullptr) engine = std::make_shared<FakeEngine>();
  return engine;
}

void FakeEngine::CountHealthCheck() {
  std::lock_guard<std::mutex> lock(mu_);
  ++health_checks_;
}

int FakeEngine::health_checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_checks_;
}

absl::Status FakeAdapter::Probe() {
  engine_->Record("probe");
  if (absl::Status s = engine_->CallFailure("probe"); !s.ok()) return s;
  return engine_->TakeProbeFailure();
}

absl::Status FakeAdapter::PauseGeneration() {
  engine_->Record("pause");
  return engine_->CallFailure("pause");
}

absl::Status FakeAdapter::ResumeGeneration() {
  engine_->Record("resume");
  return absl::OkStatus();
}

absl::Status FakeAdapter::BeginUpdate(const UpdateInfo& update) {
  engine_->Record(absl::StrCat("begin ", update.update_id, " ", update.version));
  return engine_->CallFailure("begin");
}

absl::Status FakeAdapter::FinishUpdate(const UpdateInfo& update) {
  engine_->Record(absl::StrCat("finish ", update.update_id, " ", update.version));
  return engine_->CallFailure("finish");
}

absl::Status FakeAdapter::CheckBucketReply(const HttpReply& reply) const {
  if (reply.status == 200) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("answered HTTP ", reply.status));
}

namespace {

// The fake transport as a registered kind: what the core asks of a transport, answered as a
// disaggregated one would (its engines need no GPUs named, the group's device feeds them). The
// transport itself comes from FakeGroupFactories.
class FakeTransportKind final : public TransportKind {
 public:
  absl::string_view name() const override { return "fake"; }
  std::vector<std::string> data_paths() const override { return {"broadcast"}; }
  absl::StatusOr<std::unique_ptr<Transport>> Make(TransportEnv env) const override {
    return absl::UnimplementedError("fake transports come from FakeGroupFactories");
  }
};

}  // namespace

void RegisterFakeTransportKind() {
  static std::once_flag once;
  std::call_once(once,
                 [] { (void)TransportKinds().Register(std::make_unique<FakeTransportKind>()); });
}

GroupSpec FakeGroupSpec(const std::string& name, const std::vector<std::string>& urls) {
  GroupSpec spec;
  spec.name = name;
  spec.kind = "fake";
  RegisterFakeTransportKind();
  spec.transport = "fake";
  for (const std::string& url : urls) spec.engines.push_back(EngineSpec{url, 1});
  spec.engine_options = std::make_shared<const FakeEngineOptions>();
  return spec;
}

}  // namespace wsync
