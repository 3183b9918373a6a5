#ifndef WSYNC_TESTS_FUZZ_FUZZ_CHECK_H_
#define WSYNC_TESTS_FUZZ_FUZZ_CHECK_H_

// An invariant a fuzz target asserts. A broken one aborts, so libFuzzer saves the input that broke
// it as a crash; the message says which rule and what was seen.

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, detail)                                                           \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: invariant broken: %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(detail).c_str());                                           \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

#endif  // WSYNC_TESTS_FUZZ_FUZZ_CHECK_H_
