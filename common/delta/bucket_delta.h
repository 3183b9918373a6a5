#ifndef WSYNC_COMMON_DELTA_BUCKET_DELTA_H_
#define WSYNC_COMMON_DELTA_BUCKET_DELTA_H_

// A bucket as the elements that changed since a base version (docs/DELTA.md): per tensor of the
// bucket's manifest, compared with the base bitwise, element by element at the tensor's dtype
// width, and sent in the smallest of three forms:
//
//   dense   every element (the tensor's bytes as they are);
//   bitmap  one bit per element (set: changed), then the changed elements' new values;
//   gaps    the changed positions as LEB128 varints (the first position, then each gap to the
//           next minus one), then their new values.
//
// The frame, little-endian: "WSD1", u32 tensor count; per tensor in the manifest's order: u8 form
// (0 dense, 1 bitmap, 2 gaps), u64 changed elements, u64 payload bytes, the payload. This is the
// CPU reference; a GPU encoder writes the same frame.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/manifest.h"

namespace wsync {

enum class DeltaForm : uint8_t { kDense = 0, kBitmap = 1, kGaps = 2 };

// What a delta holds, summed over its tensors.
struct DeltaStats {
  uint64_t elements = 0;          // in the bucket
  uint64_t changed_elements = 0;  // whose bits differ from the base
  uint64_t dense_bytes = 0;       // the bucket's span
  uint64_t frame_bytes = 0;       // the delta's
};

inline constexpr absl::string_view kDeltaMagic = "WSD1";

// Whether the manifest's tensors cover its span with no byte between them: a delta carries the
// tensors only, so a bucket with gaps cannot be rebuilt from one. ValidateManifest must pass
// first (no overlaps: then the lengths add up to the span only without gaps).
bool DeltaCoversSpan(const BucketManifest& manifest);

// Encodes `next` against `base`, both at least the manifest's span (each tensor at its offset).
// INVALID_ARGUMENT for spans shorter than the manifest or a tensor that is not whole elements.
// With `limit`: once the elements are counted, a frame that could not be smaller than `limit`
// bytes is not written (RESOURCE_EXHAUSTED; `stats` still counts the elements), so a bucket that
// changed nearly everywhere costs a read of both, not a frame as large as itself.
absl::StatusOr<std::string> EncodeBucketDelta(const BucketManifest& manifest,
                                              absl::Span<const uint8_t> base,
                                              absl::Span<const uint8_t> next,
                                              DeltaStats* stats = nullptr,
                                              uint64_t limit = UINT64_MAX);

// One tensor's header checked against the manifest as every decoder checks it, in this order:
// its changed count (before its payload is read), then its form and the payload's size for it.
// INVALID_ARGUMENT from RefuseDelta. The tensor must be whole elements.
absl::Status CheckDeltaCount(const TensorEntry& t, uint64_t changed);
absl::Status CheckDeltaPayload(const TensorEntry& t, uint64_t form, uint64_t changed,
                               uint64_t payload_bytes);
// A decoder's refusal of a tensor's delta: INVALID_ARGUMENT "delta of tensor '<name>': <why>".
absl::Status RefuseDelta(const TensorEntry& t, absl::string_view why);

// Writes base with `delta` applied into `out` (each tensor's range; base and out at least the
// manifest's span, and may be the same memory). Every count, length, position and the frame's end
// is checked against the manifest; a frame that disagrees is refused (INVALID_ARGUMENT, naming the
// tensor and what was wrong), and then `out` holds nothing usable: decode into memory that is
// handed on only when this returns OK.
absl::Status DecodeBucketDelta(const BucketManifest& manifest, absl::Span<const uint8_t> base,
                               absl::string_view delta, absl::Span<uint8_t> out,
                               DeltaStats* stats = nullptr);

}  // namespace wsync

#endif  // WSYNC_COMMON_DELTA_BUCKET_DELTA_H_
