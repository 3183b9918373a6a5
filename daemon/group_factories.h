#ifndef WSYNC_DAEMON_GROUP_FACTORIES_H_
#define WSYNC_DAEMON_GROUP_FACTORIES_H_

#include <string>
#include <vector>

#include "daemon/core/transport.h"

namespace wsync {

// The real engine adapters (daemon/engines) and transports (daemon/transport), as the core
// receives them: the one place that knows both.
GroupFactories DefaultGroupFactories();

// Removes the map-once route's socket directories under `base` that dead wsyncds left (see
// daemon/transport/ipc/socket_dirs.h); returns their names.
std::vector<std::string> RemoveDeadStreamSocketDirs(const std::string& base);

}  // namespace wsync

#endif  // WSYNC_DAEMON_GROUP_FACTORIES_H_
