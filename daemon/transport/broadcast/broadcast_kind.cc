// The broadcast transport's registration (daemon/transport/builtin_transport_kinds.inc).
#include <algorithm>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "daemon/transport/broadcast/broadcast_transport.h"
#include "daemon/transport/broadcast/store_peers.h"
#include "daemon/transport/broadcast/store_rank_gate.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "daemon/transport/broadcast/unique_id_rendezvous.h"

namespace wsync {
namespace {

// The meeting point every engine of the group supports: the first engine's first mode (an
// engine's binding names the one its group's options chose first), which all must support.
absl::StatusOr<RendezvousMode> GroupRendezvousMode(const TransportEnv& env) {
  if (env.adapters.empty()) return absl::InvalidArgumentError("a group needs engines");
  WSYNC_ASSIGN_OR_RETURN(BroadcastBinding * first, BroadcastBindingOf(*env.adapters.front()));
  const std::vector<RendezvousMode> modes = first->RendezvousModes();
  if (modes.empty()) {
    return absl::UnimplementedError(absl::StrCat("group '", env.spec.name, "': engine ",
                                                 env.adapters.front()->endpoint().url,
                                                 " cannot join a broadcast group"));
  }
  const RendezvousMode mode = modes.front();
  for (EngineAdapter* a : env.adapters) {
    WSYNC_ASSIGN_OR_RETURN(BroadcastBinding * binding, BroadcastBindingOf(*a));
    const std::vector<RendezvousMode> supported = binding->RendezvousModes();
    if (std::find(supported.begin(), supported.end(), mode) == supported.end()) {
      return absl::UnimplementedError(absl::StrCat("group '", env.spec.name, "': engine ",
                                                   a->endpoint().url, " cannot join through ",
                                                   RendezvousModeName(mode)));
    }
  }
  return mode;
}

class BroadcastTransportKind final : public TransportKind {
 public:
  absl::string_view name() const override { return "broadcast"; }
  std::vector<std::string> aliases() const override { return {"nccl"}; }
  std::vector<std::string> data_paths() const override { return {std::string(kBroadcastDataPath)}; }
  bool loads_nccl_library() const override { return true; }
  // Measured on 2+ GPUs (docs/PERFORMANCE.md): wsyncd's copies run in the broadcasts' own CUDA
  // context and overlap them; a trainer's copies take turns with them by time slice.
  bool pull_by_default(absl::string_view) const override { return true; }

  absl::StatusOr<std::unique_ptr<Transport>> Make(TransportEnv env) const override {
    WSYNC_ASSIGN_OR_RETURN(const RendezvousMode mode, GroupRendezvousMode(env));
    if (mode == RendezvousMode::kUniqueIdInInit) {
      return std::make_unique<BroadcastTransport>(std::move(env),
                                                  std::make_unique<UniqueIdRendezvous>());
    }
    std::vector<std::string> urls;
    for (EngineAdapter* a : env.adapters) urls.push_back(a->endpoint().url);
    auto peers = StorePeersFor(urls, env.options.advertise_address);
    if (!peers.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", env.spec.name, "': ", peers.status().message()));
    }
    // A stateless store's keys name no group: who may be a rank is told by the connecting
    // process.
    std::shared_ptr<StoreRankGate> gate;
    if (mode == RendezvousMode::kStatelessStore) {
      gate = std::make_shared<StoreRankGate>(peers->local_ips, peers->local_engines);
    }
    auto rendezvous = std::make_unique<TorchStoreRendezvous>(
        mode, env.options.bind_address, env.options.advertise_address, std::move(peers->allowed),
        std::set<uint16_t>(env.avoid_store_ports.begin(), env.avoid_store_ports.end()),
        std::move(gate));
    return std::make_unique<BroadcastTransport>(std::move(env), std::move(rendezvous));
  }
};

}  // namespace

std::unique_ptr<TransportKind> MakeBroadcastTransportKind() {
  return std::make_unique<BroadcastTransportKind>();
}

}  // namespace wsync
