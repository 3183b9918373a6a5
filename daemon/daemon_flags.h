#ifndef WSYNC_DAEMON_DAEMON_FLAGS_H_
#define WSYNC_DAEMON_DAEMON_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "daemon/config.h"

namespace wsync {

// What wsyncd's command line sets up: the daemon's config (flags over --config's file) and what
// has no place in a config file.
struct DaemonCommandLine {
  DaemonConfig config;
  std::string nccl_lib = "libnccl.so.2";
};

// Parses wsyncd's flags and the file --config names. A flag given on the command line wins over
// the file's value, and the file's over the default; each flag is registered in one table with
// the file's field it stands for, so none can be forgotten in the merge. The config's values are
// checked and completed (log settings applied, sizes and durations converted, the bind address
// defaulted, the socket directory made absolute, the engines' networks worked out). Returns -1
// to go on, or the exit code: 0 after --help, 1 (or CLI11's) after an error, which it printed.
int ParseDaemonCommandLine(int argc, const char* const* argv, DaemonCommandLine* out);

}  // namespace wsync

#endif  // WSYNC_DAEMON_DAEMON_FLAGS_H_
