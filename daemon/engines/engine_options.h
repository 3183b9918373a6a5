#ifndef WSYNC_DAEMON_ENGINES_ENGINE_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_ENGINE_OPTIONS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// The options a group of `kind` has when its spec sets none; UNIMPLEMENTED for a kind wsyncd
// cannot serve yet, so every way of naming a group refuses it in the same words.
absl::StatusOr<std::shared_ptr<const EngineOptions>> DefaultEngineOptions(EngineKind kind);

// UNIMPLEMENTED naming `kind` as one wsyncd cannot serve yet.
absl::Status EngineKindNotSupported(EngineKind kind);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_ENGINE_OPTIONS_H_
