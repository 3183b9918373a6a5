#ifndef WSYNC_DAEMON_TRANSPORT_IPC_IPC_BINDING_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_IPC_BINDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"

namespace wsync {

// The IPC transport's two data paths, where colocated engines read the bucket's bytes in place
// on their own GPUs. This header is the whole contract between the IPC transport and the engines
// that speak it: an engine kind implements IpcBinding or IpcStreamBinding
// (daemon/engines/<kind>/<kind>_ipc_binding.*), the transport calls nothing else of the engine's
// on these paths.
//
// cuda-ipc: every bucket is one request naming, per TP rank, memory the rank maps by handle.
inline constexpr absl::string_view kCudaIpcDataPath = "cuda-ipc";
// cuda-ipc-stream: one request opens the update, each TP rank maps its buffer once, then takes
// each bucket's metadata as a message on its own socket (checkpoint-engine's ZMQ protocol).
inline constexpr absl::string_view kCudaIpcStreamDataPath = "cuda-ipc-stream";

// One TP rank's view of a bucket on the CUDA-IPC data path: the memory, on the rank's own GPU,
// that the rank maps by handle and reads the bucket from. An allocation is presented whole (one
// storage per allocation: torch caches a mapping by handle and storage offset, so every bucket of
// a device's slots, regions of one allocation, reuses the first mapping), with the bucket at
// `offset` in it (the slot's offset in the allocation, or the bucket's in a trainer allocation).
struct IpcBucketView {
  std::string gpu_uuid;  // the rank's GPU, as torch prints it
  MemoryKind memory_kind = MemoryKind::kCudaIpc;
  // A cudaIpcMemHandle_t of the allocation's base (64 bytes); host mode: the shm name.
  std::string memory_handle;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;  // of the bucket's first byte
  // A cudaIpcEventHandle_t the rank waits on before reading (recorded after the bucket was
  // written), or "" when the bytes are ready already.
  std::string event_handle;
};

// One TP rank of an update streamed over per-rank sockets: the GPU it runs on, as torch prints
// its UUID, and the address wsyncd listens on for that rank ("ipc://...").
struct IpcStreamRank {
  std::string gpu_uuid;
  std::string address;
};

class IpcBinding : public DataPathBinding {
 public:
  absl::string_view data_path() const final { return kCudaIpcDataPath; }
  // The bucket's update request, one view per TP rank (rank i's on its GPU); the engine answers
  // once every rank has loaded the bucket, and only then may the views' memory be refilled.
  virtual absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                                      const std::vector<IpcBucketView>& ranks,
                                                      const BucketContext& context) const = 0;
};

class IpcStreamBinding : public DataPathBinding {
 public:
  absl::string_view data_path() const final { return kCudaIpcStreamDataPath; }
  // The request that opens an update's stream: each TP rank connects to its address (`ranks` in
  // TP-rank order) and takes the buckets there; the engine answers once every rank is done, and
  // the adapter's CheckBucketReply judges that answer.
  virtual absl::StatusOr<EngineRequest> StreamRequest(
      const UpdateInfo& update, const std::vector<IpcStreamRank>& ranks) const = 0;
};

// The adapter's binding of each path; FAILED_PRECONDITION naming the engine where it has none.
absl::StatusOr<IpcBinding*> IpcBindingOf(EngineAdapter& adapter);
absl::StatusOr<IpcStreamBinding*> IpcStreamBindingOf(EngineAdapter& adapter);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_IPC_BINDING_H_
