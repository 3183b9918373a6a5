#include "common/checksum.h"

#include <zlib.h>

#include <thread>
#include <vector>

#include "absl/strings/str_format.h"

namespace wsync {

uint32_t Crc32(const void* data, size_t bytes, uint32_t crc) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
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

}  // namespace wsync
