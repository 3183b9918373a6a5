#ifndef WSYNC_DAEMON_TRANSPORT_BUILTIN_TRANSPORT_KINDS_H_
#define WSYNC_DAEMON_TRANSPORT_BUILTIN_TRANSPORT_KINDS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/core/transport.h"

namespace wsync {

// Registers every transport of builtin_transport_kinds.inc in TransportKinds(); once per process,
// however often it is called.
void RegisterBuiltinTransportKinds();

// Makes a group's transport by the kind its spec names: what wsyncd's group factories call.
absl::StatusOr<std::unique_ptr<Transport>> MakeRegisteredTransport(TransportEnv env);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BUILTIN_TRANSPORT_KINDS_H_
