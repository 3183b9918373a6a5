#include "common/cuda/cuda_slot.h"

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"
#include "common/status_macros.h"

namespace wsync::cuda {

absl::StatusOr<std::unique_ptr<CudaSlot>> CudaSlot::Create(int device, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(auto buffer, DeviceBuffer::Create(device, bytes));
  WSYNC_ASSIGN_OR_RETURN(auto event, IpcEvent::Create(device));
  WSYNC_ASSIGN_OR_RETURN(auto stream, Stream::Create(device));
  WSYNC_ASSIGN_OR_RETURN(auto scratch, KernelScratch::Create(device));
  return std::unique_ptr<CudaSlot>(new CudaSlot(device, std::move(buffer), std::move(event),
                                                std::move(stream), std::move(scratch)));
}

absl::StatusOr<uint32_t> CudaSlot::Checksum(uint64_t bytes) {
  if (bytes > buffer_->bytes()) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  // The trainer recorded the event after its copies; the GPU orders the check after them, and
  // only this stream's result is waited for on the host.
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_->get(), event_->get(), 0));
  return DeviceCrc32(buffer_->data(), bytes, stream_->get(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaSlot::FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) {
  WSYNC_RETURN_IF_ERROR(CheckFillFits(*this, pieces, span));
  std::vector<CopyItem> items;
  for (const SourcePiece& p : pieces) items.push_back(CopyItem{p.src, p.offset, p.bytes});
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  // The trainer's signal that its tensors are ready (recorded only when its stream had work).
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_->get(), event_->get(), 0));
  return CopyAndCrc32(items, buffer_->data(), span, stream_->get(), scratch_.get());
}

absl::StatusOr<std::unique_ptr<CudaMappedSlot>> CudaMappedSlot::Open(
    int device, const std::string& memory_handle, const std::string& event_handle, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(auto mapping, IpcMapping::Open(device, memory_handle));
  WSYNC_ASSIGN_OR_RETURN(auto event, IpcEvent::Open(device, event_handle));
  WSYNC_ASSIGN_OR_RETURN(auto stream, Stream::Create(device));
  WSYNC_ASSIGN_OR_RETURN(auto scratch, KernelScratch::Create(device));
  return std::unique_ptr<CudaMappedSlot>(new CudaMappedSlot(
      device, bytes, std::move(mapping), std::move(event), std::move(stream), std::move(scratch)));
}

// The scratch's destructor waits for the last kernel that reads its work list.
CudaMappedSlot::~CudaMappedSlot() = default;

absl::Status CudaMappedSlot::CopyIn(uint64_t offset, const void* src, uint64_t bytes) {
  return CopyBatch({SlotCopy{offset, src, bytes}});
}

absl::StatusOr<std::vector<CopyItem>> CudaMappedSlot::Stage(const std::vector<SlotCopy>& copies) {
  std::vector<CopyItem> device_items;
  auto* base = static_cast<char*>(mapping_->data());
  for (const SlotCopy& c : copies) {
    if (c.offset > bytes_ || c.bytes > bytes_ - c.offset) {
      return absl::OutOfRangeError(absl::StrCat("copy of ", c.bytes, " bytes at ", c.offset,
                                                " exceeds the slot of ", bytes_, " bytes"));
    }
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, c.src) == cudaSuccess &&
        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)) {
      device_items.push_back(CopyItem{c.src, c.offset, c.bytes});
    } else {
      (void)cudaGetLastError();
      WSYNC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(base + c.offset, c.src, c.bytes, cudaMemcpyDefault, active_stream()));
    }
  }
  return device_items;
}

absl::Status CudaMappedSlot::CopyBatch(const std::vector<SlotCopy>& copies) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  WSYNC_ASSIGN_OR_RETURN(std::vector<CopyItem> items, Stage(copies));
  return BatchedCopy(items, mapping_->data(), active_stream(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaMappedSlot::CopyBatchAndChecksum(const std::vector<SlotCopy>& copies,
                                                              uint64_t span) {
  if (span > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  WSYNC_ASSIGN_OR_RETURN(std::vector<CopyItem> items, Stage(copies));
  return CopyAndCrc32(items, mapping_->data(), span, active_stream(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaMappedSlot::Checksum(uint64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  return DeviceCrc32(mapping_->data(), bytes, active_stream(), scratch_.get());
}

absl::Status CudaMappedSlot::MarkWritten() {
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_->get(), active_stream()));
  return absl::OkStatus();
}

absl::Status CudaMappedSlot::MarkReady() {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  const cudaError_t idle = cudaStreamQuery(active_stream());
  if (idle == cudaSuccess) return absl::OkStatus();
  if (idle != cudaErrorNotReady) return WSYNC_CUDA_STATUS(idle);
  return MarkWritten();
}

absl::Status CudaMappedSlot::WaitWritten() {
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_->get()));
  return absl::OkStatus();
}

}  // namespace wsync::cuda
