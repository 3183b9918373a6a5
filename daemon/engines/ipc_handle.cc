#include "daemon/engines/ipc_handle.h"

#include "absl/strings/str_cat.h"
#include "common/torch_ipc_pickle.h"

namespace wsync {

absl::StatusOr<std::string> IpcHandleBytes(const IpcBucketView& view) {
  if (view.memory_kind == MemoryKind::kCudaIpc) {
    if (view.memory_handle.size() != kCudaIpcHandleBytes) {
      return absl::InternalError(absl::StrCat("a CUDA IPC handle of ", view.memory_handle.size(),
                                              " bytes, not ", kCudaIpcHandleBytes));
    }
    return view.memory_handle;
  }
  if (view.memory_handle.empty() || view.memory_handle.size() > kCudaIpcHandleBytes) {
    return absl::InternalError(absl::StrCat("a shared-memory name of ", view.memory_handle.size(),
                                            " bytes does not fit a handle"));
  }
  std::string padded = view.memory_handle;
  padded.resize(kCudaIpcHandleBytes, '\0');
  return padded;
}

absl::StatusOr<CudaIpcTensor> IpcStorage(const IpcBucketView& view, CudaDevice device) {
  CudaIpcTensor t;
  absl::StatusOr<std::string> handle = IpcHandleBytes(view);
  if (!handle.ok()) return handle.status();
  t.ipc_handle = std::move(*handle);
  t.storage_size_bytes = view.allocation_bytes;
  t.device = std::move(device);
  if (!view.event_handle.empty()) {
    if (view.event_handle.size() != kCudaIpcHandleBytes) {
      return absl::InternalError(absl::StrCat("an IPC event handle of ", view.event_handle.size(),
                                              " bytes, not ", kCudaIpcHandleBytes));
    }
    t.event_handle = view.event_handle;
    t.event_sync_required = true;
  }
  return t;
}

}  // namespace wsync
