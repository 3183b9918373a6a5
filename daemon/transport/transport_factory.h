#ifndef WSYNC_DAEMON_TRANSPORT_TRANSPORT_FACTORY_H_
#define WSYNC_DAEMON_TRANSPORT_TRANSPORT_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/core/transport.h"

namespace wsync {

// Makes the transport a group's spec names, with the rendezvous its engines support.
absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportEnv env);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_TRANSPORT_FACTORY_H_
