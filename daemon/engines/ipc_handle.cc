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

}  // namespace wsync
