#ifndef WSYNC_TESTS_SIM_SIM_HTTP_SERVER_H_
#define WSYNC_TESTS_SIM_SIM_HTTP_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net.h"

namespace wsync {

struct SimHttpRequest {
  std::string method;
  std::string path;  // without the query, which routes ignore
  std::string body;
  std::string query;  // after the '?', as sent
  std::string content_type;
};

struct SimHttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain";
  // How the answer goes on the wire, for faults: whole at once; one byte every `trickle_ms`; or,
  // when `oversize`, a chunked body of `oversize_bytes` in place of `body` (0: endless, until
  // the client hangs up).
  int trickle_ms = 0;
  bool oversize = false;
  uint64_t oversize_bytes = 0;
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

// Faults in how a simulator's answers go on the wire, by route ("*": every route but /sim/...):
// an oversized chunked body of `oversize_mib` MiB (0: endless, until the client hangs up) in
// place of the answer, or the answer one byte every `trickle_ms`.
struct SimDeliveryKnobs {
  std::vector<std::string> oversize_routes{};
  int oversize_mib = 80;
  std::vector<std::string> trickle_routes{};
  int trickle_ms = 3000;

  // Marks `response` as the knobs say for `request`'s route.
  void Apply(const SimHttpRequest& request, SimHttpResponse& response) const;
};

// The HTTP/1.1 server of the engine simulators, serving keep-alive connections as uvicorn (which
// serves SGLang) does: requests pipelined on a connection are read as they arrive and answered
// one at a time, in order. (cpp-httplib's server drops the bytes of a pipelined request.)
class SimHttpServer {
 public:
  using Handler = std::function<void(const SimHttpRequest&, SimHttpResponse&)>;
  SimHttpServer() = default;
  ~SimHttpServer();
  SimHttpServer(const SimHttpServer&) = delete;
  SimHttpServer& operator=(const SimHttpServer&) = delete;

  void Get(const std::string& path, Handler handler);
  void Post(const std::string& path, Handler handler);
  void Options(const std::string& path, Handler handler);
  // Runs after the handler of every request a route took (before Start): it may change how the
  // answer is delivered.
  void SetShaper(Handler shaper) { shaper_ = std::move(shaper); }
  // Port 0 picks a free one; returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  // Closes every connection; handlers still running are waited for.
  void Stop();
  // The most requests one connection held at once, read but not yet answered: above 1 when a
  // client pipelined.
  int max_waiting() const { return max_waiting_.load(); }

 private:
  struct Connection {
    UniqueFd fd;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<SimHttpRequest> requests;  // read, not yet handled
    bool closed = false;
    bool close_after = false;  // a request asked for Connection: close
    int handling = 0;          // 1 while the worker handles a request
    std::atomic<bool> done{false};
    std::thread reader;
    std::thread worker;
  };
  void AcceptLoop();
  void Read(Connection* c);
  void Work(Connection* c);
  SimHttpResponse Dispatch(const SimHttpRequest& request);
  // Writes `response` as its delivery says; false when the connection failed.
  bool Write(Connection* c, const SimHttpResponse& response, bool last);

  std::map<std::pair<std::string, std::string>, Handler> routes_;
  Handler shaper_;
  UniqueFd listener_;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> max_waiting_{0};
  std::mutex mu_;  // guards connections_
  std::vector<std::unique_ptr<Connection>> connections_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SIM_SIM_HTTP_SERVER_H_
