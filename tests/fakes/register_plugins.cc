// Registers the built-in engine kinds and transports before any test runs, as wsyncd's main does
// at its start: linked into every test binary that reads or validates group specs (config files,
// the admin API, the core).
#include "daemon/engines/builtin_engine_kinds.h"
#include "daemon/transport/builtin_transport_kinds.h"

namespace {

const bool kRegistered = [] {
  wsync::RegisterBuiltinEngineKinds();
  wsync::RegisterBuiltinTransportKinds();
  return true;
}();

}  // namespace
