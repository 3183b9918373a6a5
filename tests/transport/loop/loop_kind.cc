#include "tests/transport/loop/loop_kind.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/fakes/fake_transport.h"
#include "tests/transport/loop/loop_binding.h"

namespace wsync {
namespace {

class LoopTransportKind final : public TransportKind {
 public:
  explicit LoopTransportKind(std::shared_ptr<FakeCluster> cluster) : cluster_(std::move(cluster)) {}
  absl::string_view name() const override { return "loop"; }
  std::vector<std::string> data_paths() const override { return {std::string(kLoopDataPath)}; }

  absl::StatusOr<std::unique_ptr<Transport>> Make(TransportEnv env) const override {
    for (EngineAdapter* a : env.adapters) {
      auto* binding = dynamic_cast<LoopBinding*>(a->Binding(kLoopDataPath));
      if (binding == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("engine ", a->endpoint().url, " cannot receive over the loop"));
      }
      cluster_->Engine(a->endpoint().url)->Record(absl::StrCat("loop hello ", binding->Hello()));
    }
    return std::make_unique<FakeTransport>(std::move(env), cluster_, FakeTransportOptions{},
                                           nullptr);
  }

 private:
  std::shared_ptr<FakeCluster> cluster_;
};

}  // namespace

std::unique_ptr<TransportKind> MakeLoopTransportKind(std::shared_ptr<FakeCluster> cluster) {
  return std::make_unique<LoopTransportKind>(std::move(cluster));
}

}  // namespace wsync
