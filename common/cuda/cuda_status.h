#ifndef WSYNC_COMMON_CUDA_CUDA_STATUS_H_
#define WSYNC_COMMON_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace wsync::cuda {

// InternalError carrying the call's text, where it was made and CUDA's own error string.
absl::Status CudaError(cudaError_t err, absl::string_view call, const char* file, int line);

}  // namespace wsync::cuda

#define WSYNC_CUDA_RETURN_IF_ERROR(call)                                           \
  do {                                                                             \
    cudaError_t wsync_cuda_err_ = (call);                                          \
    if (wsync_cuda_err_ != cudaSuccess)                                            \
      return ::wsync::cuda::CudaError(wsync_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define WSYNC_CUDA_STATUS(call) ::wsync::cuda::CudaError((call), #call, __FILE__, __LINE__)

#endif  // WSYNC_COMMON_CUDA_CUDA_STATUS_H_
