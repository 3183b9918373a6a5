#ifndef WSYNC_COMMON_CHECKSUM_H_
#define WSYNC_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace wsync

#endif  // WSYNC_COMMON_CHECKSUM_H_
