#include "daemon/group_factories.h"

#include "daemon/engines/adapter_factory.h"
#include "daemon/transport/ipc/socket_dirs.h"
#include "daemon/transport/transport_factory.h"

namespace wsync {

GroupFactories DefaultGroupFactories() {
  GroupFactories factories;
  factories.adapter = MakeEngineAdapter;
  factories.transport = MakeTransport;
  return factories;
}

std::vector<std::string> RemoveDeadStreamSocketDirs(const std::string& base) {
  return RemoveDeadSocketDirs(base);
}

}  // namespace wsync
