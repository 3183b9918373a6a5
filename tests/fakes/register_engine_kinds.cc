// Registers the built-in engine kinds before any test runs, as wsyncd's main does at its start:
// linked into every test binary that reads group specs (config files, the admin API).
#include "daemon/engines/builtin_engine_kinds.h"

namespace {

const bool kRegistered = [] {
  wsync::RegisterBuiltinEngineKinds();
  return true;
}();

}  // namespace
