#ifndef WSYNC_COMMON_CUDA_CUDA_SOURCE_H_
#define WSYNC_COMMON_CUDA_CUDA_SOURCE_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/cuda/cuda_resources.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

// wsyncd's mapping of one trainer allocation (cudaIpcOpenMemHandle), kept for the session.
class CudaSource final : public SourceMemory {
 public:
  static absl::StatusOr<std::unique_ptr<CudaSource>> Open(int device, const std::string& handle,
                                                          uint64_t bytes);
  const void* data() const override { return mapping_->data(); }
  uint64_t bytes() const override { return bytes_; }
  MemoryKind kind() const override { return MemoryKind::kCudaIpc; }
  const std::string& memory_handle() const override { return handle_; }

 private:
  CudaSource(std::unique_ptr<IpcMapping> mapping, std::string handle, uint64_t bytes)
      : mapping_(std::move(mapping)), handle_(std::move(handle)), bytes_(bytes) {}
  std::unique_ptr<IpcMapping> mapping_;
  std::string handle_;
  uint64_t bytes_;
};

// The trainer's side: the allocation holding a tensor, from the driver's address ranges (looked up
// through the runtime, so the client library needs no libcuda at link time), exported with
// cudaIpcGetMemHandle. Memory cudaIpc cannot export (cuMem virtual memory, as torch's expandable
// segments use) is NOT_FOUND, and the client copies that bucket itself.
class CudaSourceExporter final : public SourceExporter {
 public:
  explicit CudaSourceExporter(int device) : device_(device) {}
  void BeginUpdate() override { checked_.clear(); }
  absl::StatusOr<ExportedSource> Export(const void* data, uint64_t bytes) override;
  absl::StatusOr<uintptr_t> AllocationStart(const void* data, uint64_t bytes) override;

 private:
  struct Known {
    uint64_t id;
    std::string handle;
    uint64_t bytes;
  };
  int device_;
  std::map<uintptr_t, Known> by_base_;
  std::set<uintptr_t> checked_;  // bases whose handle was re-read in this update
  uint64_t next_id_ = 1;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_SOURCE_H_
