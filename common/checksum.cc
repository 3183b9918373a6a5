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

std::string Crc32Hex(uint32_t crc) { return absl::StrFormat("%08x", crc); }

}  // namespace wsync
