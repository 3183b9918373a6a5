#ifndef WSYNC_COMMON_COMMAND_LINE_H_
#define WSYNC_COMMON_COMMAND_LINE_H_

#include <CLI/CLI.hpp>

namespace wsync {

// Every wsync binary exits 0 when it did what was asked (and after --help or --version), 1 when
// it failed, and 2 when its command line was wrong (CLI11's own codes, 105 to 115, say nothing
// to a script that checks for usage errors).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Parses argv into `app`: -1 to go on, else the code to exit with, once CLI11 has printed the
// help, the version or what is wrong.
inline int ParseCommandLine(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  return -1;
}

}  // namespace wsync

#endif  // WSYNC_COMMON_COMMAND_LINE_H_
