#ifndef WSYNC_COMMON_CUDA_CUDA_DEVICES_H_
#define WSYNC_COMMON_CUDA_CUDA_DEVICES_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"

namespace wsync::cuda {

// What cudaGetDeviceCount and the two version queries said, as CreateCudaPlatform read them.
struct DeviceCount {
  cudaError_t error = cudaSuccess;
  std::string error_text;  // cudaGetErrorString(error)
  int devices = 0;
  int driver_version = 0;       // cudaDriverGetVersion: 0 when no driver is loadable
  int runtime_version = 0;      // cudaRuntimeGetVersion: the runtime wsyncd was built with
  std::string visible_devices;  // $CUDA_VISIBLE_DEVICES, "" when unset
};

// Why wsyncd --mode=cuda has no GPU to use, worded to point at the cause: no driver at all, a
// driver too old for the runtime wsyncd was built with (both versions named: CUDA's own text,
// "driver version is insufficient", reads the same when there is no driver), a kernel module
// that differs from its user-space library, or no device visible (CUDA_VISIBLE_DEVICES named).
// FAILED_PRECONDITION; OK when `count` found a device.
absl::Status UsableDevices(const DeviceCount& count);

// A CUDA version number as major.minor: 13000 -> "13.0", 12020 -> "12.2".
std::string CudaVersionText(int version);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_DEVICES_H_
