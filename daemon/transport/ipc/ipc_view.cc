#include "daemon/transport/ipc/ipc_view.h"

#include <utility>

namespace wsync {

IpcBucketMemory IpcBucketMemoryOf(const IpcBucketView& view) {
  return IpcBucketMemory{view.memory_kind, view.memory_handle, view.allocation_bytes, view.offset,
                         view.event_handle};
}

absl::StatusOr<CudaIpcTensor> IpcStorage(const IpcBucketView& view, CudaDevice device) {
  return IpcStorage(IpcBucketMemoryOf(view), std::move(device));
}

}  // namespace wsync
