#include "daemon/group_factories.h"

#include "daemon/engines/builtin_engine_kinds.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/transport/builtin_transport_kinds.h"
#include "daemon/transport/ipc/socket_dirs.h"

namespace wsync {

GroupFactories DefaultGroupFactories() {
  GroupFactories factories;
  RegisterBuiltinEngineKinds();
  RegisterBuiltinTransportKinds();
  factories.adapter = MakeRegisteredAdapter;
  factories.transport = MakeRegisteredTransport;
  return factories;
}

std::vector<std::string> RemoveDeadStreamSocketDirs(const std::string& base) {
  return RemoveDeadSocketDirs(base);
}

}  // namespace wsync
