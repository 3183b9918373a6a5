#ifndef WSYNC_COMMON_CHECKSUM_H_
#define WSYNC_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace wsync {

// CRC-32 (IEEE 802.3 polynomial, reflected, as zlib's crc32). Chosen because CRCs of independent
// chunks combine exactly (Crc32Combine), so a GPU kernel can checksum chunks in parallel and
// produce the same value as this host function.
uint32_t Crc32(const void* data, size_t bytes, uint32_t crc = 0);
uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, size_t bytes_b);
// Uses up to `threads` threads on chunks and combines; same value as Crc32.
uint32_t Crc32Parallel(const void* data, size_t bytes, int threads);
std::string Crc32Hex(uint32_t crc);

// "Append n zero bytes" as a linear map on a raw CRC-32 register, kept as the images of the 32 unit
// vectors. Crc32Combine(a, b, n) == ZeroBytes(n).Apply(a) ^ b, so chunks of one length combine
// with one fixed operator; the GPU checksum kernel uses these in its reduction tree.
struct Crc32Operator {
  uint32_t column[32];
  uint32_t Apply(uint32_t crc) const;
  static Crc32Operator ZeroBytes(uint64_t n);
};

// The same map as a Crc32Operator applied with four table lookups instead of 32 steps, for
// merging many equal-length chunk CRCs.
struct Crc32OperatorTable {
  uint32_t byte[4][256] = {};
  Crc32OperatorTable() = default;
  explicit Crc32OperatorTable(const Crc32Operator& op);
  uint32_t Apply(uint32_t crc) const {
    return byte[0][crc & 0xFF] ^ byte[1][(crc >> 8) & 0xFF] ^ byte[2][(crc >> 16) & 0xFF] ^
           byte[3][crc >> 24];
  }
};

inline constexpr const char kChecksumName[] = "crc32";

// "crc32-sampled": the CRC-32 of windows of a bucket rather than of all its bytes, for slots that
// the GPU which reads them also filled (colocated groups). No wire lies between the trainer's copy
// and the engines' read there, so what a check must catch is a copy that did not happen, ran
// late, or landed elsewhere, or a slot changed under it: each leaves whole windows wrong. The
// full CRC-32 runs at about half a copy's rate; the windows are 1/256 of the bytes.
inline constexpr const char kSampledChecksumName[] = "crc32-sampled";
inline constexpr uint64_t kSampleStride = uint64_t{1} << 20;
inline constexpr uint64_t kSampleWindow = 4096;

struct ByteWindow {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The windows of [0, span): kSampleWindow bytes at every multiple of kSampleStride, and the span's
// last kSampleWindow bytes (so its end is covered), in order and not overlapping.
std::vector<ByteWindow> SampledWindows(uint64_t span);
// What a trainer-filled bucket's checksum is computed by; kNone: no checksum.
enum class ChecksumKind { kNone, kCrc32, kCrc32Sampled };
// "none", "crc32", "crc32-sampled".
absl::string_view ChecksumKindName(ChecksumKind kind);
// The kind a name gives; nullopt for any other name.
std::optional<ChecksumKind> ParseChecksumKind(absl::string_view name);

// The bytes SampledWindows(span) covers; at most span.
uint64_t SampledBytes(uint64_t span);
// The CRC-32 (Crc32's) of the windows' bytes laid end to end.
uint32_t SampledCrc32(const void* data, uint64_t span);

}  // namespace wsync

#endif  // WSYNC_COMMON_CHECKSUM_H_
