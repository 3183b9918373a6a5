#include "daemon/transport/builtin_transport_kinds.h"

#include <memory>
#include <mutex>

#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"

namespace wsync {

#define WSYNC_TRANSPORT_KIND(Name) std::unique_ptr<TransportKind> Make##Name##TransportKind();
#include "builtin_transport_kinds.inc"
#undef WSYNC_TRANSPORT_KIND

void RegisterBuiltinTransportKinds() {
  static std::once_flag once;
  std::call_once(once, [] {
#define WSYNC_TRANSPORT_KIND(Name)                                                        \
  if (absl::Status s = TransportKinds().Register(Make##Name##TransportKind()); !s.ok()) { \
    WSYNC_LOG(Error, s.message());                                                        \
  }
#include "builtin_transport_kinds.inc"
#undef WSYNC_TRANSPORT_KIND
  });
}

absl::StatusOr<std::unique_ptr<Transport>> MakeRegisteredTransport(TransportEnv env) {
  WSYNC_ASSIGN_OR_RETURN(const TransportKind* kind, TransportOf(env.spec));
  return kind->Make(std::move(env));
}

}  // namespace wsync
