#ifndef WSYNC_CLIENT_CPP_PROGRESS_BAR_H_
#define WSYNC_CLIENT_CPP_PROGRESS_BAR_H_

#include <cstdint>
#include <string>

namespace wsync {

// One line of a push's progress for a terminal, redrawn in place:
// "[########............] bucket 12/30   1.20/3.00 GiB   3.41 GiB/s", filled by buckets of the
// plan. A plan not final yet (buckets_total 0: the stream is still being fed) shows both totals
// as "?" and no fill, since the bytes added so far are no total.
std::string ProgressBar(uint64_t buckets_done, uint64_t buckets_total, uint64_t bytes_done,
                        uint64_t bytes_total, double gib_per_second, int width = 24);

}  // namespace wsync

#endif  // WSYNC_CLIENT_CPP_PROGRESS_BAR_H_
