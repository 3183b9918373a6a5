#ifndef WSYNC_TESTS_ENGINES_SGLANG_SGLANG_ENGINE_PROCESS_H_
#define WSYNC_TESTS_ENGINES_SGLANG_SGLANG_ENGINE_PROCESS_H_

// SGLang's simulator (tests/engines/sglang/sglang_engine.py on host memory) as a child process of
// a C++ test: one server process and one process per TP rank, which join wsyncd's TCPStore and
// host collective as SGLang's scheduler processes do. The simulator's faults are its flags and
// POST /sim/knobs (see its docstring); what its ranks hold is GET /sim/checksums.
// WSYNC_PYTHON and WSYNC_SGLANG_ENGINE are compile definitions of the test targets.

#include <httplib.h>
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process_harness.h"

namespace wsync {

// The command line of one simulator with `tp` ranks on `port`, then `flags`.
inline std::vector<std::string> SglangEngineArgv(int port, int tp,
                                                 const std::vector<std::string>& flags = {}) {
  std::vector<std::string> argv = {
      WSYNC_PYTHON, WSYNC_SGLANG_ENGINE,  "--memory", "host",
      "--port",     std::to_string(port), "--tp",     std::to_string(tp)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

class SglangEngineProcess {
 public:
  // Starts a simulator on `port` (0: a free one) and waits until it serves HTTP. Its output goes
  // to `log_path`.
  static absl::StatusOr<std::unique_ptr<SglangEngineProcess>> Start(
      int tp, const std::vector<std::string>& flags, const std::string& log_path, int port = 0) {
    if (port == 0) port = FreePort();
    auto engine = std::unique_ptr<SglangEngineProcess>(new SglangEngineProcess(port));
    engine->process_ = std::make_unique<ChildProcess>(SglangEngineArgv(port, tp, flags), log_path);
    if (!WaitForHttp(port, absl::Seconds(20))) {
      return absl::UnavailableError(absl::StrCat("the SGLang simulator on port ", port,
                                                 " did not start: ", engine->process_->Log()));
    }
    return engine;
  }

  ~SglangEngineProcess() { Stop(); }

  // SIGTERM, then SIGKILL if it is still there after 5 s; its rank processes die with it.
  void Stop() {
    if (!process_ || !process_->running()) return;
    process_->Signal(SIGTERM);
    if (process_->Wait(absl::Seconds(5)) < 0) {
      process_->Signal(SIGKILL);
      process_->Wait(absl::Seconds(5));
    }
  }

  int port() const { return port_; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  ChildProcess& process() { return *process_; }

  // GET /sim/checksums, between updates: each rank's CRC-32 per tensor by global rank, the
  // weight version and the state the routes keep. A test fails when it does not answer.
  nlohmann::json Checksums() const {
    httplib::Client http("127.0.0.1", port_);
    http.set_read_timeout(30, 0);
    return Answer(http.Get("/sim/checksums"), "/sim/checksums");
  }
  // The update requests received so far, answered at once whatever the ranks are doing.
  int updates_received() const { return Knobs().value("updates_received", -1); }
  // The most requests that waited at once on one connection: 2 once the daemon sent an update
  // request before the previous answer came back (it pipelines).
  int max_waiting_requests() const { return Knobs().value("max_waiting_requests", 0); }

  absl::Status SetKnobs(const nlohmann::json& knobs) const {
    httplib::Client http("127.0.0.1", port_);
    auto res = http.Post("/sim/knobs", knobs.dump(), "application/json");
    if (!res || res->status != 200) {
      return absl::UnavailableError(absl::StrCat("cannot set the knobs of ", url()));
    }
    return absl::OkStatus();
  }

 private:
  // POST /sim/knobs {}: the knobs and counts, without waiting for an update's turn. A test fails
  // when it does not answer.
  nlohmann::json Knobs() const {
    httplib::Client http("127.0.0.1", port_);
    return Answer(http.Post("/sim/knobs", "{}", "application/json"), "/sim/knobs");
  }
  // The JSON of a 200 answer from `route`; the test fails on any other.
  nlohmann::json Answer(const httplib::Result& res, const char* route) const {
    if (!res || res->status != 200) {
      ADD_FAILURE() << url() << route << " did not answer";
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(res->body, nullptr, false);
  }

  explicit SglangEngineProcess(int port) : port_(port) {}

  int port_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_ENGINES_SGLANG_SGLANG_ENGINE_PROCESS_H_
