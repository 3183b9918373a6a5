#ifndef WSYNC_COMMON_CUDA_CUDA_SLOT_H_
#define WSYNC_COMMON_CUDA_CUDA_SLOT_H_

#include <memory>
#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/cuda/kernels.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

// A daemon slot: plain cudaMalloc memory exported once, with one interprocess event that the
// trainer records after filling it.
class CudaSlot final : public SlotMemory {
 public:
  static absl::StatusOr<std::unique_ptr<CudaSlot>> Create(int device, uint64_t bytes);

  MemoryKind kind() const override { return MemoryKind::kCudaIpc; }
  int device() const override { return device_; }
  uint64_t bytes() const override { return buffer_->bytes(); }
  void* data() override { return buffer_->data(); }
  std::string memory_handle() const override { return buffer_->ipc_handle(); }
  std::string event_handle() const override { return event_->handle(); }
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::StatusOr<uint32_t> FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) override;
  // The event the trainer records after filling the slot; the daemon's streams wait on it.
  cudaEvent_t producer_event() const { return event_->get(); }

 private:
  CudaSlot(int device, std::unique_ptr<DeviceBuffer> buffer, std::unique_ptr<IpcEvent> event,
           std::unique_ptr<Stream> stream, std::unique_ptr<KernelScratch> scratch)
      : device_(device),
        buffer_(std::move(buffer)),
        event_(std::move(event)),
        stream_(std::move(stream)),
        scratch_(std::move(scratch)) {}
  int device_;
  std::unique_ptr<DeviceBuffer> buffer_;
  std::unique_ptr<IpcEvent> event_;
  std::unique_ptr<Stream> stream_;  // checksums: the lowest priority, beside the broadcasts
  std::unique_ptr<KernelScratch> scratch_;
};

// The trainer's mapping of a CudaSlot.
class CudaMappedSlot final : public MappedSlot {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMappedSlot>> Open(int device,
                                                              const std::string& memory_handle,
                                                              const std::string& event_handle,
                                                              uint64_t bytes);
  ~CudaMappedSlot() override;
  uint64_t bytes() const override { return bytes_; }
  void* data() override { return mapping_->data(); }
  absl::Status CopyIn(uint64_t offset, const void* src, uint64_t bytes) override;
  absl::Status CopyBatch(const std::vector<SlotCopy>& copies) override;
  absl::StatusOr<uint32_t> CopyBatchAndChecksum(const std::vector<SlotCopy>& copies,
                                                uint64_t span) override;
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::Status MarkWritten() override;
  absl::Status WaitWritten() override;
  absl::Status MarkReady() override;
  void UseStream(void* stream) override { caller_stream_ = static_cast<cudaStream_t>(stream); }

 private:
  cudaStream_t active_stream() const {
    return caller_stream_ != nullptr ? caller_stream_ : stream_->get();
  }
  CudaMappedSlot(int device, uint64_t bytes, std::unique_ptr<IpcMapping> mapping,
                 std::unique_ptr<IpcEvent> event, std::unique_ptr<Stream> stream,
                 std::unique_ptr<KernelScratch> scratch)
      : device_(device),
        bytes_(bytes),
        mapping_(std::move(mapping)),
        event_(std::move(event)),
        stream_(std::move(stream)),
        scratch_(std::move(scratch)) {}
  // Device copies become kernel work items; host sources are copied at once with
  // cudaMemcpyAsync. Checks every range against the slot.
  absl::StatusOr<std::vector<CopyItem>> Stage(const std::vector<SlotCopy>& copies);
  int device_;
  uint64_t bytes_;
  std::unique_ptr<IpcMapping> mapping_;
  std::unique_ptr<IpcEvent> event_;
  std::unique_ptr<Stream> stream_;
  cudaStream_t caller_stream_ = nullptr;
  std::unique_ptr<KernelScratch> scratch_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_SLOT_H_
