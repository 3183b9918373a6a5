#ifndef WSYNC_DAEMON_ENGINES_IPC_HANDLE_H_
#define WSYNC_DAEMON_ENGINES_IPC_HANDLE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/torch_ipc_pickle.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/transport/ipc/ipc_binding.h"

namespace wsync {

// The 64 bytes that stand for a view's allocation in a torch IPC pickle, for every engine: a CUDA
// IPC handle as it is; in host mode the shared-memory name, NUL-padded (the host simulators open
// it by that name).
absl::StatusOr<std::string> IpcHandleBytes(const IpcBucketView& view);

// The storage every tensor of a rank's pickle lies in: the view's whole allocation (one storage
// per allocation, so torch maps a slot once and every later bucket of it reuses the mapping,
// docs/engines/torch-ipc.md), on `device` (the GPU's UUID for SGLang, an index for engines that
// overwrite it). With an event handle the rank's stream waits for the trainer's writes before it
// reads. The caller sets dtype, shape and offset.
absl::StatusOr<CudaIpcTensor> IpcStorage(const IpcBucketView& view, CudaDevice device);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_IPC_HANDLE_H_
