#include "daemon/transport/transport_factory.h"

#include "absl/strings/str_cat.h"
#include "daemon/transport/broadcast/broadcast_transport.h"
#include "daemon/transport/broadcast/store_peers.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "daemon/transport/ipc/ipc_transport.h"

namespace wsync {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportEnv env) {
  switch (env.spec.transport) {
    case TransportKind::kBroadcast: {
      // Every engine of the group must meet rank 0 the same way.
      for (EngineAdapter* a : env.adapters) {
        if (!a->Capabilities().Supports(RendezvousMode::kTorchStore)) {
          return absl::UnimplementedError(absl::StrCat(
              "group '", env.spec.name, "': engine ", a->endpoint().url,
              " cannot join through torch's TCPStore, the only rendezvous built so far"));
        }
      }
      std::vector<std::string> urls;
      for (EngineAdapter* a : env.adapters) urls.push_back(a->endpoint().url);
      auto peers = StorePeersFor(urls, env.options.advertise_address);
      if (!peers.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("group '", env.spec.name, "': ", peers.status().message()));
      }
      auto rendezvous = std::make_unique<TorchStoreRendezvous>(
          env.options.bind_address, env.options.advertise_address, std::move(*peers));
      return std::make_unique<BroadcastTransport>(std::move(env), std::move(rendezvous));
    }
    case TransportKind::kIpc:
      return std::make_unique<IpcTransport>(std::move(env));
  }
  return absl::InvalidArgumentError("unknown transport");
}

}  // namespace wsync
