#ifndef WSYNC_COMMON_CUDA_CUDA_SLOT_H_
#define WSYNC_COMMON_CUDA_CUDA_SLOT_H_

#include <memory>
#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/cuda/kernels.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

// A daemon slot: a region of plain cudaMalloc memory exported once (DeviceBuffer, shared by the
// device's regular slots and freed with the last of them), with an interprocess event of its own
// that the trainer records after filling it.
class CudaSlot final : public SlotMemory {
 public:
  // One slot, alone in its allocation.
  static absl::StatusOr<std::unique_ptr<CudaSlot>> Create(int device, uint64_t bytes);
  // `count` slots of `bytes` in one allocation, SlotStride(bytes) apart: one cudaMalloc and one
  // IPC export, each slot with its own event and streams.
  static absl::StatusOr<std::vector<std::unique_ptr<CudaSlot>>> CreateRegions(int device,
                                                                              uint32_t count,
                                                                              uint64_t bytes);

  MemoryKind kind() const override { return MemoryKind::kCudaIpc; }
  int device() const override { return device_; }
  uint64_t bytes() const override { return bytes_; }
  void* data() override { return static_cast<char*>(buffer_->data()) + offset_; }
  std::string memory_handle() const override { return buffer_->ipc_handle(); }
  uint64_t allocation_offset() const override { return offset_; }
  uint64_t allocation_bytes() const override { return buffer_->bytes(); }
  std::string event_handle() const override { return event_->handle(); }
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::StatusOr<uint32_t> SampledChecksum(uint64_t span) override;
  absl::Status FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) override;
  absl::Status WaitProducer(absl::Duration timeout) override;
  // The event the trainer records after filling the slot; the daemon's streams wait on it.
  cudaEvent_t producer_event() const { return event_->get(); }

 private:
  CudaSlot(int device, std::shared_ptr<DeviceBuffer> buffer, uint64_t offset, uint64_t bytes,
           std::unique_ptr<IpcEvent> event, std::unique_ptr<Stream> stream,
           std::unique_ptr<KernelScratch> scratch)
      : device_(device),
        buffer_(std::move(buffer)),
        offset_(offset),
        bytes_(bytes),
        event_(std::move(event)),
        stream_(std::move(stream)),
        scratch_(std::move(scratch)) {}
  static absl::StatusOr<std::unique_ptr<CudaSlot>> CreateIn(std::shared_ptr<DeviceBuffer> buffer,
                                                            int device, uint64_t offset,
                                                            uint64_t bytes);
  int device_;
  std::shared_ptr<DeviceBuffer> buffer_;
  uint64_t offset_;
  uint64_t bytes_;
  std::unique_ptr<IpcEvent> event_;
  std::unique_ptr<Stream> stream_;  // checksums: the lowest priority, beside the broadcasts
  std::unique_ptr<KernelScratch> scratch_;
  std::unique_ptr<DeviceBuffer> sample_;  // SampledChecksum's windows, made on first use
};

// The trainer's mapping of one daemon allocation (cudaIpcOpenMemHandle, once per process).
class CudaMappedAllocation final : public MappedAllocation {
 public:
  static absl::StatusOr<std::shared_ptr<CudaMappedAllocation>> Open(int device,
                                                                    const std::string& handle,
                                                                    uint64_t bytes);
  void* data() const override { return mapping_->data(); }
  uint64_t bytes() const override { return bytes_; }

 private:
  CudaMappedAllocation(std::unique_ptr<IpcMapping> mapping, uint64_t bytes)
      : mapping_(std::move(mapping)), bytes_(bytes) {}
  std::unique_ptr<IpcMapping> mapping_;
  uint64_t bytes_;
};

// The trainer's view of a CudaSlot: its region of the allocation's mapping, and its event.
class CudaMappedSlot final : public MappedSlot {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMappedSlot>> Open(
      int device, std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes,
      const std::string& event_handle);
  ~CudaMappedSlot() override;
  uint64_t bytes() const override { return bytes_; }
  void* data() override { return base_; }
  absl::Status CopyIn(uint64_t offset, const void* src, uint64_t bytes) override;
  absl::Status CopyBatch(const std::vector<SlotCopy>& copies) override;
  absl::StatusOr<uint32_t> CopyBatchAndChecksum(const std::vector<SlotCopy>& copies,
                                                uint64_t span) override;
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::StatusOr<uint32_t> SampledChecksum(uint64_t span) override;
  absl::Status WaitReaders(absl::Duration timeout) override;
  bool ReadersDone() override;
  absl::Status MarkWritten() override;
  absl::Status WaitWritten() override;
  absl::Status MarkReady() override;
  void UseStream(void* stream) override { caller_stream_ = static_cast<cudaStream_t>(stream); }

 private:
  cudaStream_t active_stream() const {
    return caller_stream_ != nullptr ? caller_stream_ : stream_->get();
  }
  CudaMappedSlot(int device, uint64_t bytes, std::shared_ptr<MappedAllocation> allocation,
                 void* base, std::unique_ptr<IpcEvent> event, std::unique_ptr<Stream> stream,
                 std::unique_ptr<KernelScratch> scratch)
      : device_(device),
        bytes_(bytes),
        allocation_(std::move(allocation)),
        base_(base),
        event_(std::move(event)),
        stream_(std::move(stream)),
        scratch_(std::move(scratch)) {}
  // Device copies become kernel work items; host sources are copied at once with
  // cudaMemcpyAsync. Checks every range against the slot.
  absl::StatusOr<std::vector<CopyItem>> Stage(const std::vector<SlotCopy>& copies);
  int device_;
  uint64_t bytes_;
  std::shared_ptr<MappedAllocation> allocation_;  // kept mapped while the slot is
  void* base_;                                    // the slot's first byte in the mapping
  std::unique_ptr<IpcEvent> event_;
  std::unique_ptr<Stream> stream_;
  cudaStream_t caller_stream_ = nullptr;
  std::unique_ptr<KernelScratch> scratch_;
  std::unique_ptr<DeviceBuffer> sample_;  // SampledChecksum's windows, made on first use
};

// crc32-sampled (common/checksum.h) of the device bytes [base, base + span): the windows gathered
// into `sample` by one batched copy, then checksummed; equal to SampledCrc32 of the same bytes.
// `sample` is made on first use for spans up to `capacity` (the slot's size). Synchronises
// `stream`.
absl::StatusOr<uint32_t> SampledDeviceCrc32(int device, const void* base, uint64_t span,
                                            uint64_t capacity,
                                            std::unique_ptr<DeviceBuffer>* sample,
                                            cudaStream_t stream, KernelScratch* scratch);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_SLOT_H_
