// The relay transport's registration (daemon/transport/builtin_transport_kinds.inc).
#include <memory>

#include "daemon/core/transport_kind.h"
#include "daemon/relay/subscription.h"
#include "daemon/transport/relay/relay_binding.h"
#include "daemon/transport/relay/relay_transport.h"

namespace wsync {
namespace {

class RelayTransportKind final : public TransportKind {
 public:
  absl::string_view name() const override { return "relay"; }
  std::vector<std::string> data_paths() const override { return {std::string(kRelayDataPath)}; }
  // The bytes cross a wire between nodes: the trainer copies them into a slot with the full
  // CRC-32, which each downstream checks where they land.
  bool pull_by_default(absl::string_view) const override { return false; }
  ChecksumKind checksum_by_default() const override { return ChecksumKind::kCrc32; }
  bool loads_nccl_library() const override { return true; }
  bool engines_speak_http() const override { return false; }
  absl::Status CheckEngineUrl(const std::string& url) const override {
    return RelayMemberNode(url).status();
  }
  absl::StatusOr<std::unique_ptr<Transport>> Make(TransportEnv env) const override {
    return std::make_unique<RelayTransport>(std::move(env));
  }
};

}  // namespace

std::unique_ptr<TransportKind> MakeRelayTransportKind() {
  return std::make_unique<RelayTransportKind>();
}

}  // namespace wsync
