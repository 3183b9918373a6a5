#include "daemon/engines/builtin_engine_kinds.h"

#include <memory>
#include <mutex>

#include "common/log.h"
#include "daemon/engines/engine_kind.h"

namespace wsync {

#define WSYNC_ENGINE_KIND(Name) std::unique_ptr<EngineKindPlugin> Make##Name##EngineKind();
#include "builtin_engine_kinds.inc"
#undef WSYNC_ENGINE_KIND

void RegisterBuiltinEngineKinds() {
  static std::once_flag once;
  std::call_once(once, [] {
#define WSYNC_ENGINE_KIND(Name)                                                     \
  if (absl::Status s = EngineKinds().Register(Make##Name##EngineKind()); !s.ok()) { \
    WSYNC_LOG(Error, s.message());                                                  \
  }
#include "builtin_engine_kinds.inc"
#undef WSYNC_ENGINE_KIND
  });
}

}  // namespace wsync
