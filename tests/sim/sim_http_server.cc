#include "tests/sim/sim_http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/beast/http/status.hpp>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/transport/http/http_message_reader.h"

namespace wsync {
namespace {

namespace http = boost::beast::http;

}  // namespace

void SimDeliveryKnobs::Apply(const SimHttpRequest& request, SimHttpResponse& response) const {
  if (request.path.rfind("/sim/", 0) == 0) return;
  auto named = [&](const std::vector<std::string>& routes) {
    return std::find(routes.begin(), routes.end(), request.path) != routes.end() ||
           std::find(routes.begin(), routes.end(), "*") != routes.end();
  };
  if (named(oversize_routes)) {
    response.oversize = true;
    response.oversize_bytes = static_cast<uint64_t>(std::max(oversize_mib, 0)) << 20;
  }
  if (named(trickle_routes)) response.trickle_ms = std::max(trickle_ms, 1);
}

SimHttpServer::~SimHttpServer() { Stop(); }

void SimHttpServer::Get(const std::string& path, Handler handler) {
  routes_[{"GET", path}] = std::move(handler);
}

void SimHttpServer::Post(const std::string& path, Handler handler) {
  routes_[{"POST", path}] = std::move(handler);
}

void SimHttpServer::Options(const std::string& path, Handler handler) {
  routes_[{"OPTIONS", path}] = std::move(handler);
}

absl::StatusOr<int> SimHttpServer::Start(const std::string& host, int port) {
  auto fd = ListenTcp(host, static_cast<uint16_t>(port));
  if (!fd.ok()) return fd.status();
  auto bound = LocalPort(fd->get());
  if (!bound.ok()) return bound.status();
  listener_ = std::move(*fd);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return *bound;
}

void SimHttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (listener_.valid()) ::shutdown(listener_.get(), SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) {
    ::shutdown(c->fd.get(), SHUT_RDWR);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->closed = true;
    }
    c->cv.notify_all();
  }
  for (auto& c : connections) {
    c->reader.join();
    c->worker.join();
  }
  listener_.reset();
}

void SimHttpServer::AcceptLoop() {
  while (!stopping_) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // the listener was shut down
    }
    auto c = std::make_unique<Connection>();
    c->fd.reset(fd);
    Connection* raw = c.get();
    std::lock_guard<std::mutex> lock(mu_);
    // Connections whose client has gone are joined here, so a long test does not pile them up.
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done) {
        (*it)->reader.join();
        (*it)->worker.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    raw->reader = std::thread([this, raw] { Read(raw); });
    raw->worker = std::thread([this, raw] { Work(raw); });
    connections_.push_back(std::move(c));
  }
}

void SimHttpServer::Read(Connection* c) {
  HttpMessageReader</*kRequest=*/true> reader(256ull << 20);
  std::vector<HttpMessageReader<true>::Message> requests;
  char chunk[64 << 10];
  while (true) {
    ssize_t n = ::recv(c->fd.get(), chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    requests.clear();
    if (!reader.Feed(chunk, static_cast<size_t>(n), &requests).ok()) break;
    for (auto& req : requests) {
      std::lock_guard<std::mutex> lock(c->mu);
      std::string target(req.target());
      const size_t question = target.find('?');
      c->requests.push_back(SimHttpRequest{
          std::string(req.method_string()), target.substr(0, question), std::move(req.body()),
          question == std::string::npos ? std::string() : target.substr(question + 1),
          std::string(req[http::field::content_type])});
      if (!req.keep_alive()) c->close_after = true;
      const int waiting = static_cast<int>(c->requests.size()) + c->handling;
      int seen = max_waiting_.load();
      while (waiting > seen && !max_waiting_.compare_exchange_weak(seen, waiting)) {
      }
      c->cv.notify_all();
    }
  }
  std::lock_guard<std::mutex> lock(c->mu);
  c->closed = true;
  c->cv.notify_all();
}

void SimHttpServer::Work(Connection* c) {
  while (true) {
    SimHttpRequest request;
    bool last;
    {
      std::unique_lock<std::mutex> lock(c->mu);
      c->cv.wait(lock, [&] { return !c->requests.empty() || c->closed; });
      if (c->requests.empty()) break;
      request = std::move(c->requests.front());
      c->requests.pop_front();
      c->handling = 1;
      last = c->close_after && c->requests.empty();
    }
    SimHttpResponse response = Dispatch(request);
    const bool written = Write(c, response, last);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->handling = 0;
    }
    if (!written || last) break;
  }
  ::shutdown(c->fd.get(), SHUT_RDWR);
  c->done = true;
}

bool SimHttpServer::Write(Connection* c, const SimHttpResponse& response, bool last) {
  const std::string head =
      absl::StrCat("HTTP/1.1 ", response.status, " ",
                   std::string(http::obsolete_reason(static_cast<http::status>(response.status))),
                   "\r\nContent-Type: ", response.content_type,
                   response.oversize ? "\r\nTransfer-Encoding: chunked"
                                     : absl::StrCat("\r\nContent-Length: ", response.body.size()),
                   last ? "\r\nConnection: close" : "", "\r\n\r\n");
  auto send = [&](const std::string& bytes) {
    return !stopping_ &&
           WriteAll(c->fd.get(), bytes.data(), bytes.size(), absl::Now() + absl::Seconds(30)).ok();
  };
  if (response.oversize) {
    // 1 MiB chunks of a JSON string that never closes, until the size is reached or the client
    // hangs up.
    constexpr uint64_t kChunk = 1 << 20;
    const std::string chunk =
        absl::StrCat("100000\r\n", "\"", std::string(kChunk - 1, 'x'), "\r\n");
    if (!send(head)) return false;
    for (uint64_t sent = 0; response.oversize_bytes == 0 || sent < response.oversize_bytes;
         sent += kChunk) {
      if (!send(chunk)) return false;
    }
    return send("0\r\n\r\n");
  }
  const std::string text = head + response.body;
  if (response.trickle_ms <= 0) return send(text);
  for (char byte : text) {
    if (!send(std::string(1, byte))) return false;
    // Slept in short steps, so that Stop is not held up.
    const absl::Time next = absl::Now() + absl::Milliseconds(response.trickle_ms);
    while (!stopping_ && absl::Now() < next) absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

SimHttpResponse SimHttpServer::Dispatch(const SimHttpRequest& request) {
  SimHttpResponse response;
  auto it = routes_.find({request.method, request.path});
  if (it == routes_.end()) {
    // As FastAPI: a path served for another method answers 405 (what a GET or an OPTIONS on a
    // POST route asks).
    bool other_method = false;
    for (const auto& [key, handler] : routes_) other_method |= key.second == request.path;
    response.status = other_method ? 405 : 404;
    response.set_content(other_method ? "Method Not Allowed" : "Not Found", "text/plain");
    return response;
  }
  it->second(request, response);
  if (shaper_) shaper_(request, response);
  return response;
}

}  // namespace wsync
