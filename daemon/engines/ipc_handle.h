#ifndef WSYNC_DAEMON_ENGINES_IPC_HANDLE_H_
#define WSYNC_DAEMON_ENGINES_IPC_HANDLE_H_

#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/engine_adapter.h"

namespace wsync {

// The 64 bytes that stand for a view's allocation in a torch IPC pickle, for every engine: a CUDA
// IPC handle as it is; in host mode the shared-memory name, NUL-padded (the host simulators open
// it by that name).
absl::StatusOr<std::string> IpcHandleBytes(const IpcBucketView& view);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_IPC_HANDLE_H_
