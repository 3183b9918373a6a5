#include "common/cuda/cuda_resources.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cuda/cuda_status.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync::cuda {
namespace {

// Destructors cannot return errors; they log them, so a leaked handle is at least visible.
void LogIfError(cudaError_t err, absl::string_view what) {
  if (err != cudaSuccess) {
    WSYNC_LOG(Warning, what, " failed during teardown: ", cudaGetErrorString(err));
  }
}

}  // namespace

absl::StatusOr<DeviceGuard> DeviceGuard::Create(int device) {
  int previous = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return DeviceGuard(previous);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) LogIfError(cudaSetDevice(previous_), "cudaSetDevice (restore)");
}

absl::StatusOr<std::unique_ptr<Stream>> Stream::Create(int device, bool urgent) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  int least = 0, greatest = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, urgent ? greatest : least));
  return std::unique_ptr<Stream>(new Stream(device, s));
}

Stream::~Stream() {
  auto guard = DeviceGuard::Create(device_);
  LogIfError(cudaStreamDestroy(stream_), "cudaStreamDestroy");
}

absl::Status Stream::Synchronize() {
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<IpcEvent>> IpcEvent::Create(int device) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  cudaEvent_t e = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcEventHandle_t h;
  cudaError_t err = cudaIpcGetEventHandle(&h, e);
  if (err != cudaSuccess) {
    cudaEventDestroy(e);
    return WSYNC_CUDA_STATUS(err);
  }
  return std::unique_ptr<IpcEvent>(
      new IpcEvent(device, e, std::string(reinterpret_cast<const char*>(&h), sizeof(h))));
}

absl::StatusOr<std::unique_ptr<IpcEvent>> IpcEvent::Open(int device, const std::string& handle) {
  cudaIpcEventHandle_t h;
  if (handle.size() != sizeof(h)) {
    return absl::InvalidArgumentError(
        absl::StrCat("event handle must be ", sizeof(h), " bytes, got ", handle.size()));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  cudaEvent_t e = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&e, h));
  return std::unique_ptr<IpcEvent>(new IpcEvent(device, e, ""));
}

IpcEvent::~IpcEvent() {
  auto guard = DeviceGuard::Create(device_);
  LogIfError(cudaEventDestroy(event_), "cudaEventDestroy");
}

absl::Status IpcEvent::Poll(absl::Duration timeout, absl::string_view what) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration nap = absl::Microseconds(20);
  while (true) {
    const cudaError_t done = cudaEventQuery(event_);
    if (done == cudaSuccess) return absl::OkStatus();
    if (done != cudaErrorNotReady) return WSYNC_CUDA_STATUS(done);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": its event was not reached within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(1));
  }
}

absl::StatusOr<std::unique_ptr<TimingEvent>> TimingEvent::Create(int device) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  cudaEvent_t e = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDefault));
  return std::unique_ptr<TimingEvent>(new TimingEvent(device, e));
}

TimingEvent::~TimingEvent() {
  auto guard = DeviceGuard::Create(device_);
  LogIfError(cudaEventDestroy(event_), "cudaEventDestroy");
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Create(int device, size_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  void* p = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  cudaIpcMemHandle_t h;
  cudaError_t err = cudaIpcGetMemHandle(&h, p);
  if (err != cudaSuccess) {
    cudaFree(p);
    return WSYNC_CUDA_STATUS(err);
  }
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(
      device, p, bytes, std::string(reinterpret_cast<const char*>(&h), sizeof(h))));
}

DeviceBuffer::~DeviceBuffer() {
  auto guard = DeviceGuard::Create(device_);
  LogIfError(cudaFree(data_), "cudaFree");
}

absl::StatusOr<std::unique_ptr<IpcMapping>> IpcMapping::Open(int device,
                                                             const std::string& handle) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory handle must be ", sizeof(h), " bytes, got ", handle.size()));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  void* p = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  return std::unique_ptr<IpcMapping>(new IpcMapping(device, p));
}

IpcMapping::~IpcMapping() {
  auto guard = DeviceGuard::Create(device_);
  LogIfError(cudaIpcCloseMemHandle(data_), "cudaIpcCloseMemHandle");
}

}  // namespace wsync::cuda
