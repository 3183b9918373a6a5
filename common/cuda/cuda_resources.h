#ifndef WSYNC_COMMON_CUDA_CUDA_RESOURCES_H_
#define WSYNC_COMMON_CUDA_CUDA_RESOURCES_H_

// RAII owners for the CUDA objects wsync holds for a long time: device selection, streams,
// interprocess events and IPC memory mappings.

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace wsync::cuda {

// Makes `device` current for the scope and restores the previous device afterwards.
class DeviceGuard {
 public:
  static absl::StatusOr<DeviceGuard> Create(int device);
  DeviceGuard(DeviceGuard&& other) noexcept : previous_(other.previous_) { other.previous_ = -1; }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;
  ~DeviceGuard();

 private:
  explicit DeviceGuard(int previous) : previous_(previous) {}
  int previous_;
};

class Stream {
 public:
  // `urgent`: the device's greatest priority, so the block scheduler serves this stream's kernels
  // (rank 0's broadcasts) before bulk work such as checksums queued at the same time.
  static absl::StatusOr<std::unique_ptr<Stream>> Create(int device, bool urgent = false);
  ~Stream();
  cudaStream_t get() const { return stream_; }
  absl::Status Synchronize();

 private:
  Stream(int device, cudaStream_t s) : device_(device), stream_(s) {}
  int device_;
  cudaStream_t stream_;
};

// An event created with cudaEventInterprocess | cudaEventDisableTiming, or opened from a handle.
class IpcEvent {
 public:
  static absl::StatusOr<std::unique_ptr<IpcEvent>> Create(int device);
  static absl::StatusOr<std::unique_ptr<IpcEvent>> Open(int device, const std::string& handle);
  ~IpcEvent();
  cudaEvent_t get() const { return event_; }
  // The 64-byte cudaIpcEventHandle_t (only for events this process created).
  const std::string& handle() const { return handle_; }
  // Returns once the event's latest record (by whichever process made it) has completed, asking
  // with cudaEventQuery and never blocking in the driver: DEADLINE_EXCEEDED naming `what` after
  // `timeout`, so a record that never completes (its process died with it pending) fails the
  // caller instead of hanging it.
  absl::Status Poll(absl::Duration timeout, absl::string_view what) const;

 private:
  IpcEvent(int device, cudaEvent_t e, std::string handle)
      : device_(device), event_(e), handle_(std::move(handle)) {}
  int device_;
  cudaEvent_t event_;
  std::string handle_;
};

// A plain event with timing, for measuring where a broadcast's time went.
class TimingEvent {
 public:
  static absl::StatusOr<std::unique_ptr<TimingEvent>> Create(int device);
  ~TimingEvent();
  cudaEvent_t get() const { return event_; }

 private:
  TimingEvent(int device, cudaEvent_t e) : device_(device), event_(e) {}
  int device_;
  cudaEvent_t event_;
};

// Device memory allocated with plain cudaMalloc and exported once through cudaIpcGetMemHandle.
class DeviceBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Create(int device, size_t bytes);
  ~DeviceBuffer();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const std::string& ipc_handle() const { return handle_; }

 private:
  DeviceBuffer(int device, void* data, size_t bytes, std::string handle)
      : device_(device), data_(data), bytes_(bytes), handle_(std::move(handle)) {}
  int device_;
  void* data_;
  size_t bytes_;
  std::string handle_;
};

// Another process's cudaMalloc'd memory mapped through cudaIpcOpenMemHandle.
class IpcMapping {
 public:
  static absl::StatusOr<std::unique_ptr<IpcMapping>> Open(int device, const std::string& handle);
  ~IpcMapping();
  void* data() const { return data_; }

 private:
  IpcMapping(int device, void* data) : device_(device), data_(data) {}
  int device_;
  void* data_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_RESOURCES_H_
