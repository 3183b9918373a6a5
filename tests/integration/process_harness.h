#ifndef WSYNC_TESTS_INTEGRATION_PROCESS_HARNESS_H_
#define WSYNC_TESTS_INTEGRATION_PROCESS_HARNESS_H_

// Runs the real binaries (wsyncd, wsyncctl) and the engine simulators as child processes for
// integration tests.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"

namespace wsync {

class ChildProcess {
 public:
  // `env`: "NAME=value" entries set in the child on top of this process's environment.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
               const std::vector<std::string>& env = {})
      : log_path_(log_path) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const std::string& entry : env) ::putenv(const_cast<char*>(entry.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (running()) {
      Signal(SIGKILL);
      Wait(absl::Seconds(5));
    }
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
    }
    return !exited_;
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  // Exit status, or -1 if it did not exit in time.
  int Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!exited_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string log_path_;
};

inline int FreePort() {
  auto fd = ListenTcp("127.0.0.1", 0);
  return fd.ok() ? *LocalPort(fd->get()) : 0;
}

// Runs a command to completion, returning its exit code and output.
inline std::pair<int, std::string> RunCommand(const std::vector<std::string>& argv,
                                              const std::string& log_path) {
  ChildProcess p(argv, log_path);
  int rc = p.Wait(absl::Seconds(60));
  return {rc, p.Log()};
}

inline bool WaitForHttp(int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (ConnectTcp("127.0.0.1", port, absl::Now() + absl::Milliseconds(100)).ok()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

}  // namespace wsync

#endif  // WSYNC_TESTS_INTEGRATION_PROCESS_HARNESS_H_
