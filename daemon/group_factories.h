#ifndef WSYNC_DAEMON_GROUP_FACTORIES_H_
#define WSYNC_DAEMON_GROUP_FACTORIES_H_

#include "daemon/core/transport.h"

namespace wsync {

// The real engine adapters (daemon/engines) and transports (daemon/transport), as the core
// receives them: the one place that knows both.
GroupFactories DefaultGroupFactories();

}  // namespace wsync

#endif  // WSYNC_DAEMON_GROUP_FACTORIES_H_
