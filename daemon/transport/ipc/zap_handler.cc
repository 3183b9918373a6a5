#include "daemon/transport/ipc/zap_handler.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <vector>
#include <zmq_addon.hpp>

namespace wsync {
namespace {

// How often the handler looks at its stop flag while no request comes.
constexpr std::chrono::milliseconds kPollSlice{100};

}  // namespace

ZapHandler::ZapHandler(zmq::context_t& context) : socket_(context, zmq::socket_type::rep) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { Serve(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  socket_.close();
}

void ZapHandler::Register(const std::string& domain, std::shared_ptr<StreamPeerGate> gate) {
  std::lock_guard<std::mutex> lock(mu_);
  gates_[domain] = std::move(gate);
}

void ZapHandler::Unregister(const std::string& domain) {
  std::lock_guard<std::mutex> lock(mu_);
  gates_.erase(domain);
}

std::pair<std::string, std::string> ZapHandler::Judge(const std::vector<zmq::message_t>& request) {
  // Version, request id, domain, address, routing id, mechanism (NULL: no credential frames).
  if (request.size() < 6 || request[0].to_string() != "1.0") {
    return {"400", "malformed ZAP request"};
  }
  std::shared_ptr<StreamPeerGate> gate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = gates_.find(request[2].to_string());
    if (it != gates_.end()) gate = it->second;
  }
  if (gate == nullptr) return {"400", "no such stream socket"};
  const absl::Status admitted = gate->Admit(request[3].to_string());
  if (!admitted.ok()) return {"400", std::string(admitted.message())};
  return {"200", "OK"};
}

void ZapHandler::Serve() {
  while (!stop_) {
    std::vector<zmq::message_t> request;
    try {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPollSlice);
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) {
        continue;
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      continue;
    }
    const auto [code, text] = Judge(request);
    // The User-Id stays empty: libzmq 4.3 hands a non-empty one to the socket as a message of
    // its own (stream_engine_base_t::write_credential), which a REQ socket takes for a broken
    // reply, and then it never returns the rank's real one.
    const std::string id = request.size() > 1 ? request[1].to_string() : "";
    std::array<zmq::const_buffer, 6> reply = {zmq::str_buffer("1.0"), zmq::buffer(id),
                                              zmq::buffer(code),      zmq::buffer(text),
                                              zmq::const_buffer(),    zmq::const_buffer()};
    try {
      zmq::send_multipart(socket_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
    }
  }
}

}  // namespace wsync
