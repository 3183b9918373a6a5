#ifndef WSYNC_COMMON_CUDA_DELTA_DECODER_H_
#define WSYNC_COMMON_CUDA_DELTA_DECODER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/delta/bucket_delta.h"
#include "common/manifest.h"

namespace wsync::cuda {

// The bucket delta decoder on a GPU: what DecodeBucketDelta does (docs/DELTA.md), with the base,
// the frame and the output in memory the device reads and writes. One thread walks the headers
// (each one's place depends on the payloads before it), the host checks them as the CPU decoder
// does, and then every tensor's payload is applied in parallel: dense ones copied, bitmaps
// counted and scattered by rank, gap-coded positions decoded where each varint ends and summed
// per tensor. Work arrays are kept from bucket to bucket: one user (stream) at a time.
class DeltaDecoder {
 public:
  static absl::StatusOr<std::unique_ptr<DeltaDecoder>> Create(int device);
  ~DeltaDecoder();
  DeltaDecoder(const DeltaDecoder&) = delete;
  DeltaDecoder& operator=(const DeltaDecoder&) = delete;

  // Writes `base` with the frame (`frame_bytes` at `frame`) applied into `out` (each tensor's
  // range; `out` may be `base`); synchronises `stream`. A frame that disagrees with the manifest
  // is refused as the CPU decoder refuses it (INVALID_ARGUMENT naming the tensor and what was
  // wrong), and then `out` holds nothing usable. UNIMPLEMENTED for element widths other than 1,
  // 2, 4 or 8 bytes.
  absl::Status Decode(const BucketManifest& manifest, const void* base, const void* frame,
                      uint64_t frame_bytes, void* out, cudaStream_t stream,
                      DeltaStats* stats = nullptr);

 private:
  struct Arrays;
  explicit DeltaDecoder(int device);
  int device_;
  std::unique_ptr<Arrays> arrays_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_DELTA_DECODER_H_
