#include "daemon/transport/broadcast/broadcast_binding.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::string_view RendezvousModeName(RendezvousMode mode) {
  switch (mode) {
    case RendezvousMode::kTorchStore:
      return "torch-store";
    case RendezvousMode::kUniqueIdInInit:
      return "unique-id-in-init";
    case RendezvousMode::kStatelessStore:
      return "stateless-store";
  }
  return "unknown";
}

absl::StatusOr<BroadcastBinding*> BroadcastBindingOf(EngineAdapter& adapter) {
  auto* binding = dynamic_cast<BroadcastBinding*>(adapter.Binding(kBroadcastDataPath));
  if (binding == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", adapter.endpoint().url, " cannot receive over the broadcast data path"));
  }
  return binding;
}

}  // namespace wsync
