#include "common/host/guarded_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/checksum.h"

namespace wsync {
namespace {

// The guarded bodies: plain loops over memory, nothing to unwind (see fault_guard.h).
struct CopyJob {
  const GuardedCopyPiece* pieces;
  size_t count;
};
void CopyPieces(void* arg) {
  const auto* job = static_cast<const CopyJob*>(arg);
  for (size_t i = 0; i < job->count; ++i) {
    std::memcpy(job->pieces[i].dst, job->pieces[i].src, job->pieces[i].bytes);
  }
}

struct CrcJob {
  const unsigned char* data;
  uint64_t bytes;
  uint32_t crc;
};
void CrcChunk(void* arg) {
  auto* job = static_cast<CrcJob*>(arg);
  job->crc = Crc32(job->data, job->bytes);
}

// Crc32Parallel's split, so both give one value.
constexpr uint64_t kMinChunk = 8u << 20;

}  // namespace

const void* GuardedCopy(const std::vector<GuardedRange>& ranges,
                        const std::vector<GuardedCopyPiece>& pieces) {
  CopyJob job{pieces.data(), pieces.size()};
  return RunGuarded(ranges.data(), ranges.size(), CopyPieces, &job);
}

GuardedCrc GuardedCrc32(const std::vector<GuardedRange>& ranges, const void* data, uint64_t bytes,
                        int threads) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t n = 1;
  if (threads > 1 && bytes >= 2 * kMinChunk) n = std::min<size_t>(threads, bytes / kMinChunk);
  const uint64_t chunk = (bytes + n - 1) / n;
  std::vector<CrcJob> jobs(n);
  std::vector<const void*> faults(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t begin = i * chunk;
    jobs[i] = CrcJob{p + begin, std::min(chunk, bytes - begin), 0};
  }
  // Threads are made and joined outside the guards; each guards its own chunk.
  std::vector<std::thread> workers;
  for (size_t i = 1; i < n; ++i) {
    workers.emplace_back(
        [&, i] { faults[i] = RunGuarded(ranges.data(), ranges.size(), CrcChunk, &jobs[i]); });
  }
  faults[0] = RunGuarded(ranges.data(), ranges.size(), CrcChunk, &jobs[0]);
  for (std::thread& w : workers) w.join();
  GuardedCrc out;
  for (size_t i = 0; i < n; ++i) {
    if (faults[i] != nullptr) {
      out.fault = faults[i];
      return out;
    }
  }
  out.crc = jobs[0].crc;
  for (size_t i = 1; i < n; ++i) out.crc = Crc32Combine(out.crc, jobs[i].crc, jobs[i].bytes);
  return out;
}

}  // namespace wsync
