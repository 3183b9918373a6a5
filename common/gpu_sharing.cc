#include "common/gpu_sharing.h"

#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace wsync {

GpuSharing DetectGpuSharing() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  GpuSharing sharing;
  sharing.control_pipe =
      absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps", "/control");
  struct stat st;
  sharing.mps = ::stat(sharing.control_pipe.c_str(), &st) == 0;
  return sharing;
}

std::string GpuSharing::Summary() const {
  return mps ? "mps" : absl::StrCat("time slices (no ", control_pipe, ")");
}

std::string GpuSharing::Describe() const {
  if (mps) {
    return absl::StrCat("MPS is running (", control_pipe,
                        "): the trainer's copies overlap wsyncd's broadcasts on a shared GPU");
  }
  return absl::StrCat(
      "no MPS control pipe at ", control_pipe,
      ": the trainer's copies and wsyncd's broadcasts on the trainer's GPU take turns by time "
      "slice, which holds the data plane to about 0.6 of the NCCL ceiling; run "
      "nvidia-cuda-mps-control -d on trainer nodes for full speed (docs/PERFORMANCE.md)");
}

}  // namespace wsync
