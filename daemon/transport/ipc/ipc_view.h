#ifndef WSYNC_DAEMON_TRANSPORT_IPC_IPC_VIEW_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_IPC_VIEW_H_

#include "absl/status/statusor.h"
#include "common/torch_ipc/ipc_handle.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/transport/ipc/ipc_binding.h"

namespace wsync {

// The memory a rank's view names, as the torch IPC library takes it (common/torch_ipc/
// ipc_handle.h). The one place an IpcBucketView becomes the library's type, shared by the
// engines' payloads and the IPC transport's stream frames, so that the view's fields are read
// here only.
IpcBucketMemory IpcBucketMemoryOf(const IpcBucketView& view);

// IpcStorage of the view's memory.
absl::StatusOr<CudaIpcTensor> IpcStorage(const IpcBucketView& view, CudaDevice device);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_IPC_VIEW_H_
