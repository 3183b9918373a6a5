#ifndef WSYNC_TESTS_SIM_STOP_SIGNALS_H_
#define WSYNC_TESTS_SIM_STOP_SIGNALS_H_

#include <signal.h>

namespace wsync {

// A simulator's main thread blocks SIGINT and SIGTERM before starting any thread (so every thread
// inherits the mask and the main thread alone takes them, in sigwait) and ignores SIGPIPE (a
// daemon that hangs up mid-answer must not kill the simulator).
inline sigset_t BlockStopSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop;
}

// Returns once SIGINT or SIGTERM arrives.
inline void WaitForStopSignal(const sigset_t& stop) {
  int sig = 0;
  sigwait(&stop, &sig);
}

}  // namespace wsync

#endif  // WSYNC_TESTS_SIM_STOP_SIGNALS_H_
