#ifndef WSYNC_DAEMON_ENGINES_BUILTIN_ENGINE_KINDS_H_
#define WSYNC_DAEMON_ENGINES_BUILTIN_ENGINE_KINDS_H_

namespace wsync {

// Registers every kind of builtin_engine_kinds.inc in EngineKinds(); once per process, however
// often it is called.
void RegisterBuiltinEngineKinds();

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_BUILTIN_ENGINE_KINDS_H_
