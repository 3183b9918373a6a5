#include "common/host/fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <mutex>

namespace wsync {
namespace {

// One RunGuarded call, on its own stack; the thread's guards form a list, innermost first.
struct Guard {
  sigjmp_buf env;
  const GuardedRange* ranges;
  size_t count;
  Guard* outer;
  // Set by the handler, read after siglongjmp: volatile so the compiler reloads it.
  const void* volatile fault;
};

// Only the faulting thread's own guards may take its fault. Read by the handler: wsyncd links this
// statically, where thread-local access is a plain %fs-relative load (no allocation).
thread_local Guard* t_innermost = nullptr;

// The disposition before ours, written before ours is installed and never after.
struct sigaction g_previous;
std::once_flag g_install_once;

bool Covers(const Guard& guard, const void* address) {
  for (size_t i = 0; i < guard.count; ++i) {
    if (guard.ranges[i].Contains(address)) return true;
  }
  return false;
}

// A SIGBUS that is not ours: what would have happened without this handler.
void Forward(int sig, siginfo_t* info, void* context) {
  const bool handled = g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN;
  if (handled && (g_previous.sa_flags & SA_SIGINFO) != 0) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (handled) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action (a synchronous SIGBUS cannot be ignored: the kernel would kill us anyway). A
  // fault re-runs the access when the handler returns and dies of it; a SIGBUS sent with kill()
  // is raised again, delivered once this handler returns.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(SIGBUS);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (info != nullptr && info->si_code == BUS_ADRERR) {
    for (Guard* g = t_innermost; g != nullptr; g = g->outer) {
      if (Covers(*g, info->si_addr)) {
        g->fault = info->si_addr;
        // Restores the mask sigsetjmp saved (SIGBUS unblocked) and resumes in RunGuarded.
        siglongjmp(g->env, 1);
      }
    }
  }
  Forward(sig, info, context);
}

}  // namespace

bool GuardedRange::Contains(const void* address) const {
  const auto a = reinterpret_cast<uintptr_t>(address);
  const auto b = reinterpret_cast<uintptr_t>(begin);
  return a >= b && a - b < bytes;
}

void InstallFaultGuard() {
  std::call_once(g_install_once, [] {
    sigaction(SIGBUS, nullptr, &g_previous);
    struct sigaction ours {};
    ours.sa_sigaction = OnSigbus;
    // SA_ONSTACK: a thread with an alternate signal stack keeps using it.
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(SIGBUS, &ours, nullptr);
  });
}

const void* RunGuarded(const GuardedRange* ranges, size_t count, void (*fn)(void*), void* arg) {
  InstallFaultGuard();
  Guard guard;
  guard.ranges = ranges;
  guard.count = count;
  guard.outer = t_innermost;
  guard.fault = nullptr;
  // savemask = 1: the jump out of the handler restores the signal mask of this point.
  if (sigsetjmp(guard.env, 1) != 0) {
    // Back from the handler: the guards fn opened inside this one were abandoned with it.
    t_innermost = guard.outer;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return guard.fault;
  }
  t_innermost = &guard;
  // The handler must see this guard before fn touches the memory, and fn must be done with it
  // before the guard goes.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(arg);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_innermost = guard.outer;
  return nullptr;
}

}  // namespace wsync
