#include "tests/engines/echo/echo_kind.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/engines/echo/echo_loop_binding.h"

namespace wsync {
namespace {

class EchoOptions final : public EngineOptions {
 public:
  EchoOptions(std::string greeting, int ranks) : greeting_(std::move(greeting)), ranks_(ranks) {}
  absl::string_view kind() const override { return "echo"; }
  absl::Status Validate() const override {
    if (ranks_ < 1) return absl::InvalidArgumentError("echo ranks_per_engine must be at least 1");
    return absl::OkStatus();
  }
  // Echo engines have no checker of their weights.
  absl::Status WeightCheckerSupported() const override {
    return absl::InvalidArgumentError("echo engines keep no checksums");
  }
  bool Equals(const EngineOptions& other) const override {
    const auto* o = dynamic_cast<const EchoOptions*>(&other);
    return o != nullptr && o->greeting_ == greeting_ && o->ranks_ == ranks_;
  }
  std::string Describe() const override {
    return absl::StrCat("greeting=", greeting_, ", ranks_per_engine=", ranks_);
  }
  const std::string& greeting() const { return greeting_; }
  int ranks() const { return ranks_; }

 private:
  std::string greeting_;
  int ranks_;
};

class EchoKind final : public EngineKindPlugin {
 public:
  explicit EchoKind(std::shared_ptr<FakeCluster> cluster) : cluster_(std::move(cluster)) {}
  absl::string_view name() const override { return "echo"; }

  absl::StatusOr<std::shared_ptr<const EngineOptions>> ParseOptions(
      const nlohmann::json& options) const override {
    std::string greeting = "hello";
    int ranks = 1;
    for (const auto& [key, value] : options.items()) {
      if (key == "greeting" && value.is_string()) {
        greeting = value.get<std::string>();
      } else if (key == "ranks_per_engine" && value.is_number_integer()) {
        ranks = value.get<int>();
      } else {
        return absl::InvalidArgumentError(absl::StrCat("bad echo option \"", key, "\""));
      }
    }
    auto parsed = std::make_shared<const EchoOptions>(greeting, ranks);
    if (absl::Status s = parsed->Validate(); !s.ok()) return s;
    return parsed;
  }

  nlohmann::json OptionsToJson(const EngineOptions& options) const override {
    const auto& echo = static_cast<const EchoOptions&>(options);
    return {{"greeting", echo.greeting()}, {"ranks_per_engine", echo.ranks()}};
  }

  absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeAdapter(
      const GroupSpec& spec, const EngineEndpoint& endpoint,
      const AdapterTimeouts&) const override {
    auto adapter =
        std::make_unique<FakeAdapter>(endpoint, cluster_->Engine(endpoint.url), FakeCapabilities());
    const auto* options = dynamic_cast<const EchoOptions*>(spec.engine_options.get());
    adapter->AddBinding(
        std::make_unique<EchoLoopBinding>(options != nullptr ? options->greeting() : "hello"));
    return adapter;
  }

 private:
  std::shared_ptr<FakeCluster> cluster_;
};

}  // namespace

std::unique_ptr<EngineKindPlugin> MakeEchoEngineKind(std::shared_ptr<FakeCluster> cluster) {
  return std::make_unique<EchoKind>(std::move(cluster));
}

}  // namespace wsync
