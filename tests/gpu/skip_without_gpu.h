#ifndef WSYNC_TESTS_GPU_SKIP_WITHOUT_GPU_H_
#define WSYNC_TESTS_GPU_SKIP_WITHOUT_GPU_H_

// The GPU tests run only where a CUDA device exists; elsewhere each skips, saying why.

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"

namespace wsync::cuda {

inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace wsync::cuda

#define SKIP_WITHOUT_GPU() \
  if (!::wsync::cuda::HaveGpu()) GTEST_SKIP() << "no CUDA device on this machine"

#endif  // WSYNC_TESTS_GPU_SKIP_WITHOUT_GPU_H_
