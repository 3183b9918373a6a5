#include "common/torch_ipc/ipc_handle.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace wsync {

absl::StatusOr<std::string> IpcHandleBytes(const IpcBucketMemory& memory) {
  if (memory.memory_kind == MemoryKind::kCudaIpc) {
    if (memory.memory_handle.size() != kCudaIpcHandleBytes) {
      return absl::InternalError(absl::StrCat("a CUDA IPC handle of ", memory.memory_handle.size(),
                                              " bytes, not ", kCudaIpcHandleBytes));
    }
    return memory.memory_handle;
  }
  if (memory.memory_handle.empty() || memory.memory_handle.size() > kCudaIpcHandleBytes) {
    return absl::InternalError(absl::StrCat("a shared-memory name of ", memory.memory_handle.size(),
                                            " bytes does not fit a handle"));
  }
  std::string padded = memory.memory_handle;
  padded.resize(kCudaIpcHandleBytes, '\0');
  return padded;
}

absl::StatusOr<CudaIpcTensor> IpcStorage(const IpcBucketMemory& memory, CudaDevice device) {
  CudaIpcTensor t;
  absl::StatusOr<std::string> handle = IpcHandleBytes(memory);
  if (!handle.ok()) return handle.status();
  t.ipc_handle = std::move(*handle);
  t.storage_size_bytes = memory.allocation_bytes;
  t.device = std::move(device);
  if (!memory.event_handle.empty()) {
    if (memory.event_handle.size() != kCudaIpcHandleBytes) {
      return absl::InternalError(absl::StrCat("an IPC event handle of ", memory.event_handle.size(),
                                              " bytes, not ", kCudaIpcHandleBytes));
    }
    t.event_handle = memory.event_handle;
    t.event_sync_required = true;
  }
  return t;
}

}  // namespace wsync
