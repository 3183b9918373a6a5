#include "common/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace wsync::cuda {

absl::Status CudaError(cudaError_t err, absl::string_view call, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace wsync::cuda
