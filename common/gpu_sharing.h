#ifndef WSYNC_COMMON_GPU_SHARING_H_
#define WSYNC_COMMON_GPU_SHARING_H_

#include <string>

namespace wsync {

// How processes share the trainer's GPU. Without MPS the GPU runs one process's work at a time and
// switches by time slice (about 1.8 ms measured on H200), so the trainer's copies into the slots
// and wsyncd's broadcasts take turns instead of overlapping (docs/PERFORMANCE.md).
struct GpuSharing {
  bool mps = false;          // an MPS control pipe is present
  std::string control_pipe;  // where it was looked for
  // One line for the daemon's log: what was found and what it means for speed.
  std::string Describe() const;
  // A few words for `wsyncctl status`: "mps" or "time slices (no <pipe>)".
  std::string Summary() const;
};

// Looks for the MPS control pipe where CUDA clients look for it: $CUDA_MPS_PIPE_DIRECTORY, else
// /tmp/nvidia-mps.
GpuSharing DetectGpuSharing();

}  // namespace wsync

#endif  // WSYNC_COMMON_GPU_SHARING_H_
