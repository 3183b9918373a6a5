#include "client/cpp/progress_bar.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace wsync {

std::string ProgressBar(uint64_t buckets_done, uint64_t buckets_total, uint64_t bytes_done,
                        uint64_t bytes_total, double gib_per_second, int width) {
  const double fraction =
      bytes_total > 0 ? std::min(1.0, static_cast<double>(bytes_done) / bytes_total) : 0.0;
  const int filled = static_cast<int>(fraction * width + 0.5);
  const double gib = 1ull << 30;
  return absl::StrFormat("[%s%s] bucket %llu/%llu  %.2f/%.2f GiB  %.2f GiB/s",
                         std::string(filled, '#'), std::string(width - filled, '.'),
                         static_cast<unsigned long long>(buckets_done),
                         static_cast<unsigned long long>(buckets_total), bytes_done / gib,
                         bytes_total / gib, gib_per_second);
}

}  // namespace wsync
