#include "daemon/transport/transport_factory.h"

#include "absl/strings/str_cat.h"
#include "daemon/transport/broadcast/broadcast_transport.h"
#include "daemon/transport/broadcast/store_peers.h"
#include "daemon/transport/broadcast/store_rank_gate.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "daemon/transport/broadcast/unique_id_rendezvous.h"
#include "daemon/transport/ipc/ipc_transport.h"

namespace wsync {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportEnv env) {
  switch (env.spec.transport) {
    case TransportKind::kBroadcast: {
      // Every engine of the group meets rank 0 the same way: the first engine's mode (an
      // adapter names the one its group's options chose first), which all must support.
      if (env.adapters.empty()) return absl::InvalidArgumentError("a group needs engines");
      const std::vector<RendezvousMode> modes = env.adapters.front()->Capabilities().rendezvous;
      if (modes.empty()) {
        return absl::UnimplementedError(absl::StrCat("group '", env.spec.name, "': engine ",
                                                     env.adapters.front()->endpoint().url,
                                                     " cannot join a broadcast group"));
      }
      const RendezvousMode mode = modes.front();
      for (EngineAdapter* a : env.adapters) {
        if (!a->Capabilities().Supports(mode)) {
          return absl::UnimplementedError(absl::StrCat("group '", env.spec.name, "': engine ",
                                                       a->endpoint().url, " cannot join through ",
                                                       RendezvousModeName(mode)));
        }
      }
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
      // vLLM's store keys name no group: who may be a rank is told by the connecting process.
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
    case TransportKind::kIpc:
      return std::make_unique<IpcTransport>(std::move(env));
  }
  return absl::InvalidArgumentError("unknown transport");
}

}  // namespace wsync
