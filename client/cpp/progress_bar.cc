#include "client/cpp/progress_bar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace wsync {

std::string ProgressBar(uint64_t buckets_done, uint64_t buckets_total, uint64_t bytes_done,
                        uint64_t bytes_total, double gib_per_second, int width) {
  // The bar fills by buckets of the plan. While the plan is not final (a stream still being fed:
  // buckets_total 0), the bytes added so far are no total either: both show as "?", unfilled.
  const bool planned = buckets_total > 0;
  const double fraction =
      planned ? std::min(1.0, static_cast<double>(buckets_done) / buckets_total) : 0.0;
  const int filled = static_cast<int>(fraction * width + 0.5);
  const double gib = 1ull << 30;
  const std::string buckets =
      planned ? absl::StrCat(static_cast<unsigned long long>(buckets_total)) : "?";
  const std::string bytes =
      planned && bytes_total > 0 ? absl::StrFormat("%.2f", bytes_total / gib) : "?";
  return absl::StrFormat("[%s%s] bucket %llu/%s  %.2f/%s GiB  %.2f GiB/s", std::string(filled, '#'),
                         std::string(width - filled, '.'),
                         static_cast<unsigned long long>(buckets_done), buckets, bytes_done / gib,
                         bytes, gib_per_second);
}

}  // namespace wsync
