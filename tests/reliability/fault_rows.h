#ifndef WSYNC_TESTS_RELIABILITY_FAULT_ROWS_H_
#define WSYNC_TESTS_RELIABILITY_FAULT_ROWS_H_

// The fault matrix's table: one row per fault, filled by each fault's test (the one-daemon
// faults and the relay's, linked into one binary) and printed once at the end.

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tests/reliability/process_resources.h"

namespace wsync {

struct FaultRow {
  std::string fault;
  double detection_s = -1;  // the slowest round; < 0: not measured
  std::string detected_as;
  int inputs = 0;  // bad inputs tried, over every round
  bool daemon_up = true;
  bool next_update_ok = true;
  std::string leaks = "not checked";
};

inline std::vector<FaultRow>& FaultRows() {
  static auto* rows = new std::vector<FaultRow>();
  return *rows;
}

inline constexpr int kFaultRounds = 3;

// wsyncd at rest after the last round against wsyncd at rest after the first: equal, but for
// gRPC's pools (a thread or two, with their stacks) and one anonymous mapping of malloc's (more
// under ASan). A leak of one of anything per fault shows as two over the rounds after the first.
inline constexpr LeakTolerance kNoLeak{.threads = 0,
                                       .library_threads = 2,
                                       .fds = 0,
                                       .file_maps = 0,
                                       .anon_maps = kAnonMapsNoise,
                                       .shm = 0};

// A row's leaks column: "none" where `last` is within `tolerance` of `first`, else each count's
// change.
inline std::string LeaksBetween(const ProcessResources& first, const ProcessResources& last,
                                const LeakTolerance& tolerance) {
  if (WithinTolerance(first, last, tolerance)) return "none";
  return absl::StrFormat("threads %+d, fds %+d, file maps %+d, anon maps %+d, shm %+d",
                         last.own_threads - first.own_threads, last.fds - first.fds,
                         last.file_maps - first.file_maps, last.anon_maps() - first.anon_maps(),
                         last.shm - first.shm);
}

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_FAULT_ROWS_H_
