#include "common/cuda/cuda_slot.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"
#include "common/status_macros.h"

namespace wsync::cuda {

absl::StatusOr<std::unique_ptr<CudaSlot>> CudaSlot::CreateIn(std::shared_ptr<DeviceBuffer> buffer,
                                                             int device, uint64_t offset,
                                                             uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(auto event, IpcEvent::Create(device));
  WSYNC_ASSIGN_OR_RETURN(auto stream, Stream::Create(device));
  WSYNC_ASSIGN_OR_RETURN(auto scratch, KernelScratch::Create(device));
  return std::unique_ptr<CudaSlot>(new CudaSlot(device, std::move(buffer), offset, bytes,
                                                std::move(event), std::move(stream),
                                                std::move(scratch)));
}

absl::StatusOr<std::unique_ptr<CudaSlot>> CudaSlot::Create(int device, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer, DeviceBuffer::Create(device, bytes));
  return CreateIn(std::move(buffer), device, 0, bytes);
}

absl::StatusOr<std::vector<std::unique_ptr<CudaSlot>>> CudaSlot::CreateRegions(int device,
                                                                               uint32_t count,
                                                                               uint64_t bytes) {
  if (count == 0 || bytes == 0) return absl::InvalidArgumentError("slot size must be positive");
  const uint64_t stride = SlotStride(bytes);
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer,
                         DeviceBuffer::Create(device, stride * count));
  std::vector<std::unique_ptr<CudaSlot>> slots;
  for (uint32_t i = 0; i < count; ++i) {
    WSYNC_ASSIGN_OR_RETURN(auto slot, CreateIn(buffer, device, stride * i, bytes));
    slots.push_back(std::move(slot));
  }
  return slots;
}

absl::StatusOr<uint32_t> CudaSlot::Checksum(uint64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  // The trainer recorded the event after its copies; the GPU orders the check after them, and
  // only this stream's result is waited for on the host.
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_->get(), event_->get(), 0));
  return DeviceCrc32(data(), bytes, stream_->get(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaSlot::SampledChecksum(uint64_t span) {
  if (span > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_->get(), event_->get(), 0));
  return SampledDeviceCrc32(device_, data(), span, bytes_, &sample_, stream_->get(),
                            scratch_.get());
}

absl::StatusOr<uint32_t> SampledDeviceCrc32(int device, const void* base, uint64_t span,
                                            uint64_t capacity,
                                            std::unique_ptr<DeviceBuffer>* sample,
                                            cudaStream_t stream, KernelScratch* scratch) {
  const std::vector<ByteWindow> windows = SampledWindows(span);
  std::vector<CopyItem> items;
  items.reserve(windows.size());
  uint64_t packed = 0;
  for (const ByteWindow& w : windows) {
    items.push_back(CopyItem{static_cast<const char*>(base) + w.offset, packed, w.bytes});
    packed += w.bytes;
  }
  if (packed == 0) return Crc32(nullptr, 0);
  if (*sample == nullptr || (*sample)->bytes() < packed) {
    // Made once, for the slot's whole size, so no later bucket allocates (or frees) mid-update.
    WSYNC_ASSIGN_OR_RETURN(*sample,
                           DeviceBuffer::Create(device, SampledBytes(std::max(capacity, span))));
  }
  WSYNC_RETURN_IF_ERROR(BatchedCopy(items, (*sample)->data(), stream, scratch));
  return DeviceCrc32((*sample)->data(), packed, stream, scratch);
}

absl::Status CudaSlot::WaitProducer(absl::Duration timeout) {
  return event_->Poll(timeout, "the trainer's writes to the slot (did the trainer die?)");
}

absl::Status CudaSlot::FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) {
  WSYNC_RETURN_IF_ERROR(CheckFillFits(*this, pieces, span));
  std::vector<CopyItem> items;
  for (const SourcePiece& p : pieces) items.push_back(CopyItem{p.src, p.offset, p.bytes});
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  // The trainer's signal that its tensors are ready (recorded only when its stream had work).
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_->get(), event_->get(), 0));
  WSYNC_RETURN_IF_ERROR(BatchedCopy(items, data(), stream_->get(), scratch_.get()));
  // The broadcast that follows runs on another stream: the bytes are in before this returns.
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_->get()));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CudaMappedAllocation>> CudaMappedAllocation::Open(
    int device, const std::string& handle, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(auto mapping, IpcMapping::Open(device, handle));
  return std::shared_ptr<CudaMappedAllocation>(new CudaMappedAllocation(std::move(mapping), bytes));
}

absl::StatusOr<std::unique_ptr<CudaMappedSlot>> CudaMappedSlot::Open(
    int device, std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes,
    const std::string& event_handle) {
  if (allocation == nullptr || offset > allocation->bytes() ||
      bytes > allocation->bytes() - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("a slot of ", bytes, " bytes at ", offset, " does not fit its allocation of ",
                     allocation == nullptr ? 0 : allocation->bytes(), " bytes"));
  }
  void* base = static_cast<char*>(allocation->data()) + offset;
  WSYNC_ASSIGN_OR_RETURN(auto event, IpcEvent::Open(device, event_handle));
  WSYNC_ASSIGN_OR_RETURN(auto stream, Stream::Create(device));
  WSYNC_ASSIGN_OR_RETURN(auto scratch, KernelScratch::Create(device));
  return std::unique_ptr<CudaMappedSlot>(new CudaMappedSlot(device, bytes, std::move(allocation),
                                                            base, std::move(event),
                                                            std::move(stream), std::move(scratch)));
}

// The scratch's destructor waits for the last kernel that reads its work list.
CudaMappedSlot::~CudaMappedSlot() = default;

absl::Status CudaMappedSlot::CopyIn(uint64_t offset, const void* src, uint64_t bytes) {
  return CopyBatch({SlotCopy{offset, src, bytes}});
}

absl::StatusOr<std::vector<CopyItem>> CudaMappedSlot::Stage(const std::vector<SlotCopy>& copies) {
  std::vector<CopyItem> device_items;
  auto* base = static_cast<char*>(base_);
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
  return BatchedCopy(items, base_, active_stream(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaMappedSlot::CopyBatchAndChecksum(const std::vector<SlotCopy>& copies,
                                                              uint64_t span) {
  if (span > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  WSYNC_ASSIGN_OR_RETURN(std::vector<CopyItem> items, Stage(copies));
  return CopyAndCrc32(items, base_, span, active_stream(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaMappedSlot::Checksum(uint64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  return DeviceCrc32(base_, bytes, active_stream(), scratch_.get());
}

absl::StatusOr<uint32_t> CudaMappedSlot::SampledChecksum(uint64_t span) {
  if (span > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  return SampledDeviceCrc32(device_, base_, span, bytes_, &sample_, active_stream(),
                            scratch_.get());
}

// The event's latest record is the trainer's own after its last fill, or, after an engine that
// keeps a live view read the slot, that engine's record after its load (LMDeploy with
// require_clone false, docs/engines/lmdeploy.md): the slot may be overwritten once it completes.
// Polled here rather than waited on by the copy stream (cudaStreamWaitEvent), because a record
// that never completes would hang the stream, and because MarkReady's record would otherwise
// replace the engine's before wsyncd's copy waits on the event.
absl::Status CudaMappedSlot::WaitReaders(absl::Duration timeout) {
  return event_->Poll(timeout,
                      "the slot's previous bucket (the engine that read it has not finished its "
                      "load; did it die?)");
}

bool CudaMappedSlot::ReadersDone() {
  return event_->Poll(absl::ZeroDuration(), "the slot's previous bucket").code() !=
         absl::StatusCode::kDeadlineExceeded;
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
