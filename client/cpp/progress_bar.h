#ifndef WSYNC_CLIENT_CPP_PROGRESS_BAR_H_
#define WSYNC_CLIENT_CPP_PROGRESS_BAR_H_

#include <cstdint>
#include <string>

namespace wsync {

// One line of a push's progress for a terminal, redrawn in place:
// "[########............] bucket 12/30   1.20/3.00 GiB   3.41 GiB/s"; a total of 0 (not known)
// shows as "?".
std::string ProgressBar(uint64_t buckets_done, uint64_t buckets_total, uint64_t bytes_done,
                        uint64_t bytes_total, double gib_per_second, int width = 24);

}  // namespace wsync

#endif  // WSYNC_CLIENT_CPP_PROGRESS_BAR_H_
