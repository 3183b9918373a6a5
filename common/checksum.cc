#include "common/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WSYNC_CRC32_CLMUL 1
#endif

namespace wsync {
namespace {

uint32_t Crc32Zlib(uint32_t crc, const unsigned char* p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, p, n));
}

#ifdef WSYNC_CRC32_CLMUL

// CRC-32 by carry-less multiplication ("Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", Intel, 2009), for the bit-reflected polynomial 0xEDB88320.
//
// In the reflected domain a 16-byte little-endian block is a polynomial whose first bit has the
// highest degree. Folding a block A forward by D bits replaces it with A * x^D mod P, which is
// computed as lo64(A) * k_lo ^ hi64(A) * k_hi with k_lo = x^(D+32) mod P and k_hi = x^(D-32) mod P,
// each bit-reflected and shifted left by one (the carry-less product of reflected operands is
// reflected and shifted by one bit). The product has at most 96 bits and is xored into the block D
// bits ahead, which leaves the CRC of the whole message unchanged. Folding everything into one
// 16-byte block X thus gives a message with the same raw CRC register as the input; X and the
// last < 16 bytes are finished by the table-driven zlib, so no Barrett reduction is needed.
//
// The constants below are these values for D = 512 (four blocks run in parallel) and D = 128.
constexpr uint64_t kFold512Lo = 0x154442bd4;  // x^(512+32) mod P, reflected, << 1
constexpr uint64_t kFold512Hi = 0x1c6e41596;  // x^(512-32) mod P, reflected, << 1
constexpr uint64_t kFold128Lo = 0x1751997d0;  // x^(128+32) mod P, reflected, << 1
constexpr uint64_t kFold128Hi = 0x0ccaa009e;  // x^(128-32) mod P, reflected, << 1
constexpr size_t kClmulMinBytes = 64;

__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i a, __m128i k, __m128i next) {
  const __m128i lo = _mm_clmulepi64_si128(a, k, 0x00);  // lo64(a) * lo64(k)
  const __m128i hi = _mm_clmulepi64_si128(a, k, 0x11);  // hi64(a) * hi64(k)
  return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

// zlib's crc32(crc, p, n) for n >= kClmulMinBytes.
__attribute__((target("pclmul,sse4.1"))) uint32_t Crc32Clmul(uint32_t crc, const unsigned char* p,
                                                             size_t n) {
  auto load = [](const unsigned char* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  };
  // zlib's register starts as ~crc; xoring it into the first four bytes lets the folds start
  // from a zero register.
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  __m128i x1 = load(p + 16);
  __m128i x2 = load(p + 32);
  __m128i x3 = load(p + 48);
  p += 64;
  n -= 64;
  const __m128i k512 =
      _mm_set_epi64x(static_cast<long long>(kFold512Hi), static_cast<long long>(kFold512Lo));
  while (n >= 64) {
    x0 = Fold(x0, k512, load(p));
    x1 = Fold(x1, k512, load(p + 16));
    x2 = Fold(x2, k512, load(p + 32));
    x3 = Fold(x3, k512, load(p + 48));
    p += 64;
    n -= 64;
  }
  const __m128i k128 =
      _mm_set_epi64x(static_cast<long long>(kFold128Hi), static_cast<long long>(kFold128Lo));
  __m128i x = Fold(x0, k128, x1);
  x = Fold(x, k128, x2);
  x = Fold(x, k128, x3);
  while (n >= 16) {
    x = Fold(x, k128, load(p));
    p += 16;
    n -= 16;
  }
  // X has the same raw register as everything so far when run from a zero register, which is
  // zlib's crc32 with crc = ~0; the rest continues from there.
  alignas(16) unsigned char block[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(block), x);
  return Crc32Zlib(Crc32Zlib(0xFFFFFFFFu, block, sizeof(block)), p, n);
}

bool HaveClmul() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  }();
  return have;
}

#endif  // WSYNC_CRC32_CLMUL

}  // namespace

uint32_t Crc32(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
#ifdef WSYNC_CRC32_CLMUL
  if (bytes >= kClmulMinBytes && HaveClmul()) return Crc32Clmul(crc, p, bytes);
#endif
  return Crc32Zlib(crc, p, bytes);
}

uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, size_t bytes_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(bytes_b)));
}

uint32_t Crc32Parallel(const void* data, size_t bytes, int threads) {
  constexpr size_t kMinChunk = 8u << 20;
  if (threads <= 1 || bytes < 2 * kMinChunk) return Crc32(data, bytes);
  size_t n = std::min<size_t>(threads, bytes / kMinChunk);
  size_t chunk = (bytes + n - 1) / n;
  std::vector<uint32_t> crcs(n);
  std::vector<std::thread> workers;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    workers.emplace_back([&, i] {
      size_t begin = i * chunk;
      size_t len = std::min(chunk, bytes - begin);
      crcs[i] = Crc32(p + begin, len);
    });
  }
  for (auto& w : workers) w.join();
  uint32_t crc = crcs[0];
  for (size_t i = 1; i < n; ++i) {
    size_t len = std::min(chunk, bytes - i * chunk);
    crc = Crc32Combine(crc, crcs[i], len);
  }
  return crc;
}

uint32_t Crc32Operator::Apply(uint32_t crc) const {
  uint32_t out = 0;
  for (int i = 0; crc != 0; ++i, crc >>= 1) {
    if (crc & 1) out ^= column[i];
  }
  return out;
}

Crc32Operator Crc32Operator::ZeroBytes(uint64_t n) {
  // One zero byte through the reflected register: eight shifts, each xoring the polynomial in
  // when the low bit falls out.
  Crc32Operator step;
  for (int i = 0; i < 32; ++i) {
    uint32_t c = 1u << i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    step.column[i] = c;
  }
  Crc32Operator result;
  for (int i = 0; i < 32; ++i) result.column[i] = 1u << i;
  // Square-and-multiply over the bits of n (the operators commute: all are powers of one).
  while (n != 0) {
    if (n & 1) {
      Crc32Operator next;
      for (int i = 0; i < 32; ++i) next.column[i] = step.Apply(result.column[i]);
      result = next;
    }
    Crc32Operator squared;
    for (int i = 0; i < 32; ++i) squared.column[i] = step.Apply(step.column[i]);
    step = squared;
    n >>= 1;
  }
  return result;
}

std::string Crc32Hex(uint32_t crc) { return absl::StrFormat("%08x", crc); }

Crc32OperatorTable::Crc32OperatorTable(const Crc32Operator& op) {
  for (int b = 0; b < 4; ++b) {
    for (uint32_t v = 0; v < 256; ++v) byte[b][v] = op.Apply(v << (8 * b));
  }
}

absl::string_view ChecksumKindName(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kNone:
      return "none";
    case ChecksumKind::kCrc32:
      return kChecksumName;
    case ChecksumKind::kCrc32Sampled:
      return kSampledChecksumName;
  }
  return "unknown";
}

std::optional<ChecksumKind> ParseChecksumKind(absl::string_view name) {
  for (ChecksumKind kind :
       {ChecksumKind::kNone, ChecksumKind::kCrc32, ChecksumKind::kCrc32Sampled}) {
    if (name == ChecksumKindName(kind)) return kind;
  }
  return std::nullopt;
}

std::vector<ByteWindow> SampledWindows(uint64_t span) {
  std::vector<ByteWindow> windows;
  for (uint64_t at = 0; at < span; at += kSampleStride) {
    windows.push_back(ByteWindow{at, std::min(kSampleWindow, span - at)});
  }
  if (!windows.empty()) {
    const uint64_t covered = windows.back().offset + windows.back().bytes;
    if (covered < span) {
      const uint64_t start = std::max(covered, span - kSampleWindow);
      windows.push_back(ByteWindow{start, span - start});
    }
  }
  return windows;
}

uint64_t SampledBytes(uint64_t span) {
  uint64_t bytes = 0;
  for (const ByteWindow& w : SampledWindows(span)) bytes += w.bytes;
  return bytes;
}

uint32_t SampledCrc32(const void* data, uint64_t span) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0;
  for (const ByteWindow& w : SampledWindows(span)) crc = Crc32(p + w.offset, w.bytes, crc);
  return crc;
}

}  // namespace wsync
