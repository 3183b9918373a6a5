#ifndef WSYNC_COMMON_CUDA_DELTA_ENCODER_H_
#define WSYNC_COMMON_CUDA_DELTA_ENCODER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/delta/bucket_delta.h"
#include "common/manifest.h"

namespace wsync::cuda {

// The bucket delta encoder on a GPU: the frame EncodeBucketDelta writes (docs/DELTA.md), byte for
// byte, from a base and a new bucket in memory the device reads (its own, or pinned host memory),
// into device memory. Fused passes over the bucket: one kernel compares both at each element's
// width and keeps a bit per element; the forms are chosen from the counts on the host, as the CPU
// codec chooses them; a second kernel sizes the gap-coded positions (only where they may be the
// smallest form), and a third writes the payloads straight from the bits. So the bucket's bytes
// are read once, and only the changed elements again. Work arrays grow as needed and are kept
// from bucket to bucket: one user (stream) at a time.
class DeltaEncoder {
 public:
  static absl::StatusOr<std::unique_ptr<DeltaEncoder>> Create(int device);
  ~DeltaEncoder();
  DeltaEncoder(const DeltaEncoder&) = delete;
  DeltaEncoder& operator=(const DeltaEncoder&) = delete;

  // Encodes `next` against `base` (each tensor at its manifest offset) into `frame`, of
  // `capacity` bytes, and returns the frame's size; synchronises `stream`. As EncodeBucketDelta:
  // RESOURCE_EXHAUSTED, with `stats` counting the elements, where the frame could not be smaller
  // than `limit` (nothing is written); INVALID_ARGUMENT for a tensor that is not whole elements.
  // RESOURCE_EXHAUSTED also for a frame larger than `capacity`, and UNIMPLEMENTED for an element
  // width other than 1, 2, 4 or 8 bytes (the CPU codec takes those).
  absl::StatusOr<uint64_t> Encode(const BucketManifest& manifest, const void* base,
                                  const void* next, void* frame, uint64_t capacity,
                                  cudaStream_t stream, DeltaStats* stats = nullptr,
                                  uint64_t limit = UINT64_MAX);

  // Seconds from the last Encode's start to the end of each pass it ran (0: not run): the count
  // (pass 1 and the counts read back), the positions' sizes (pass 2), the frame written; and
  // pass 1's kernel alone, on the GPU's clock.
  struct Phases {
    double counted = 0, sized = 0, written = 0, compare_kernel = 0;
  };
  Phases last_phases() const { return phases_; }

 private:
  struct Arrays;
  Phases phases_;
  explicit DeltaEncoder(int device);
  int device_;
  std::unique_ptr<Arrays> arrays_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_DELTA_ENCODER_H_
