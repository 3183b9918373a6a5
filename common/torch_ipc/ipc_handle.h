#ifndef WSYNC_COMMON_TORCH_IPC_IPC_HANDLE_H_
#define WSYNC_COMMON_TORCH_IPC_IPC_HANDLE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"
#include "common/torch_ipc/torch_ipc_pickle.h"

namespace wsync {

// Where a bucket lies in memory exported for another process: what a torch IPC pickle needs to
// name it. The library's own type, so that it depends on no daemon layer; each engine fills it
// from its view of the bucket.
struct IpcBucketMemory {
  MemoryKind memory_kind = MemoryKind::kCudaIpc;
  // A cudaIpcMemHandle_t of the allocation's base (64 bytes); host mode: the shared-memory name.
  std::string memory_handle;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;  // of the bucket's first byte in the allocation
  // A cudaIpcEventHandle_t the reader waits on before reading (recorded after the bucket was
  // written), or "" when the bytes are ready already.
  std::string event_handle;
};

// The 64 bytes that stand for the allocation in a torch IPC pickle, for every engine: a CUDA IPC
// handle as it is; in host mode the shared-memory name, NUL-padded (the host simulators open it by
// that name).
absl::StatusOr<std::string> IpcHandleBytes(const IpcBucketMemory& memory);

// The storage every tensor of a rank's pickle lies in: the whole allocation (one storage per
// allocation, so torch maps a slot once and every later bucket of it reuses the mapping,
// docs/engines/torch-ipc.md), on `device` (a GPU's UUID for an engine that maps by UUID, an index
// for engines that overwrite it). With an event handle the rank's stream waits for the trainer's
// writes before it reads. The caller sets dtype, shape and offset.
absl::StatusOr<CudaIpcTensor> IpcStorage(const IpcBucketMemory& memory, CudaDevice device);

}  // namespace wsync

#endif  // WSYNC_COMMON_TORCH_IPC_IPC_HANDLE_H_
