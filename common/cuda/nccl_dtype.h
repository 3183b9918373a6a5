#ifndef WSYNC_COMMON_CUDA_NCCL_DTYPE_H_
#define WSYNC_COMMON_CUDA_NCCL_DTYPE_H_

#include <nccl.h>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace wsync::cuda {

// The NCCL type a broadcast of `dtype` uses: torch's ProcessGroupNCCL's, which every receiver
// (an engine, or another wsyncd) uses too; NCCL splits a collective's work by element, so both
// sides must agree. INVALID_ARGUMENT for a dtype torch's NCCL backend cannot broadcast.
absl::StatusOr<ncclDataType_t> NcclTypeOf(DType dtype);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_NCCL_DTYPE_H_
