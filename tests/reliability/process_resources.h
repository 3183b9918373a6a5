#ifndef WSYNC_TESTS_RELIABILITY_PROCESS_RESOURCES_H_
#define WSYNC_TESTS_RELIABILITY_PROCESS_RESOURCES_H_

// What a process holds, read from /proc and /dev/shm, for the soak and the fault matrix: a leak of
// threads, descriptors, mappings, shared memory or memory shows as growth between two samples
// taken when the process is idle.

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace wsync {

struct ProcessResources {
  int threads = 0;
  // Of `threads`, those a library named (gRPC's: "grpcpp_sync_ser", "event_engine", ...). gRPC
  // grows its pools for calls and shrinks them when idle, within its own bounds. The others keep
  // the process's name: its own threads (every std::thread of wsyncd's).
  int library_threads = 0;
  int own_threads = 0;
  int fds = 0;
  int maps = 0;       // every mapping
  int file_maps = 0;  // mappings of a file: libraries, shared memory (/dev/shm), ...
  int shm = 0;        // /dev/shm entries named wsync-<pid>-...
  int64_t rss_kib = 0;

  // Anonymous mappings: heaps, thread stacks, malloc's arenas.
  int anon_maps() const { return maps - file_maps; }
  std::string Describe() const {
    return absl::StrCat("threads ", threads, " (", library_threads, " of libraries), fds ", fds,
                        ", maps ", maps, " (", file_maps, " of files), shm ", shm, ", rss ",
                        rss_kib / 1024, " MiB");
  }
};

inline int CountDirEntries(const std::string& dir, const std::string& prefix = "") {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (prefix.empty() || absl::StartsWith(name, prefix)) ++n;
  }
  ::closedir(d);
  return n;
}

inline int CountThreadsNamed(int pid, const std::string& name) {
  const std::string task = absl::StrCat("/proc/", pid, "/task");
  DIR* d = ::opendir(task.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat(task, "/", e->d_name, "/comm"));
    std::string comm_name;
    if (std::getline(comm, comm_name) && comm_name == name) ++n;
  }
  ::closedir(d);
  return n;
}

// -1 everywhere when the process is gone.
inline ProcessResources SampleResources(int pid) {
  ProcessResources r;
  const std::string proc = absl::StrCat("/proc/", pid);
  r.threads = CountDirEntries(proc + "/task");
  std::string own_name;
  std::getline(std::ifstream(proc + "/comm"), own_name);
  r.own_threads = CountThreadsNamed(pid, own_name);
  r.library_threads = r.threads - r.own_threads;
  r.fds = CountDirEntries(proc + "/fd");
  r.shm = CountDirEntries("/dev/shm", absl::StrCat("wsync-", pid, "-"));
  std::ifstream maps(proc + "/maps");
  std::string line;
  r.maps = maps ? 0 : -1;
  while (std::getline(maps, line)) {
    ++r.maps;
    // "address perms offset dev inode pathname": a file's mapping has a path (an inode).
    if (line.find(" /") != std::string::npos) ++r.file_maps;
  }
  std::ifstream status(proc + "/status");
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      std::string kib = line.substr(6, line.find(" kB") - 6);
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(kib), &r.rss_kib);
    }
  }
  return r;
}

// The process's threads by name ("grpcpp_sync_ser x5, wsyncd x3"), to say which ones leaked.
inline std::string ThreadNames(int pid) {
  std::map<std::string, int> names;
  const std::string task = absl::StrCat("/proc/", pid, "/task");
  DIR* d = ::opendir(task.c_str());
  if (d == nullptr) return "";
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat(task, "/", e->d_name, "/comm"));
    std::string name;
    if (std::getline(comm, name)) ++names[name];
  }
  ::closedir(d);
  std::string out;
  for (const auto& [name, n] : names) absl::StrAppend(&out, out.empty() ? "" : ", ", name, " x", n);
  return out;
}

// How far `now` may exceed `base` and still count as no leak. Threads, descriptors, shared
// memory and mappings of files do not move on their own. Anonymous mappings do: malloc grows
// and trims an arena's heap by changing the protection of part of its reservation, which splits
// one mapping in two and merges them back (and ASan's allocator maps its regions as it goes).
struct LeakTolerance {
  int threads = 0;  // the process's own
  int library_threads = 0;
  int fds = 0;
  int file_maps = 0;
  int anon_maps = 0;
  int shm = 0;
};

inline bool WithinTolerance(const ProcessResources& base, const ProcessResources& now,
                            const LeakTolerance& t) {
  // A thread's stack and guard page are two anonymous mappings.
  const int extra_pool_threads = std::max(0, now.library_threads - base.library_threads);
  return now.threads >= 0 && now.own_threads <= base.own_threads + t.threads &&
         now.library_threads <= base.library_threads + t.library_threads &&
         now.fds <= base.fds + t.fds && now.file_maps <= base.file_maps + t.file_maps &&
         now.anon_maps() <= base.anon_maps() + t.anon_maps + 2 * extra_pool_threads &&
         now.shm <= base.shm + t.shm;
}

// What malloc and, in the sanitized build, ASan's allocator add to anonymous mappings without a
// leak (LeakSanitizer finds leaked memory there). The wsyncd under test runs with one malloc
// arena (RealCluster), so new arenas add none; trimming the heap still splits a mapping.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAsan = true;
#else
inline constexpr bool kUnderAsan = false;
#endif
#else
inline constexpr bool kUnderAsan = false;
#endif
inline constexpr int kAnonMapsNoise = kUnderAsan ? 64 : 1;

// The least of each count over `window`: the process at rest, without the threads and
// connections that come and go while it serves (a gRPC server thread picking up a call, a
// timer thread waking).
inline ProcessResources IdleResources(int pid, absl::Duration window = absl::Milliseconds(600)) {
  ProcessResources low = SampleResources(pid);
  const absl::Time deadline = absl::Now() + window;
  while (absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    const ProcessResources r = SampleResources(pid);
    low.threads = std::min(low.threads, r.threads);
    low.library_threads = std::min(low.library_threads, r.library_threads);
    low.own_threads = std::min(low.own_threads, r.own_threads);
    low.fds = std::min(low.fds, r.fds);
    low.maps = std::min(low.maps, r.maps);
    low.file_maps = std::min(low.file_maps, r.file_maps);
    low.shm = std::min(low.shm, r.shm);
    low.rss_kib = std::min(low.rss_kib, r.rss_kib);
  }
  return low;
}

// Samples the process at rest until it is within tolerance of `base` (threads and connections
// wind down after an update) or `settle` passes; returns the last sample.
inline ProcessResources SettledResources(int pid, const ProcessResources& base,
                                         const LeakTolerance& t,
                                         absl::Duration settle = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + settle;
  ProcessResources now = IdleResources(pid);
  while (!WithinTolerance(base, now, t) && absl::Now() < deadline) now = IdleResources(pid);
  return now;
}

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_PROCESS_RESOURCES_H_
