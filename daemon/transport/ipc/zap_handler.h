#ifndef WSYNC_DAEMON_TRANSPORT_IPC_ZAP_HANDLER_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_ZAP_HANDLER_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "daemon/transport/ipc/stream_peer_gate.h"

namespace wsync {

// A ZMQ context's authentication handler (ZAP, RFC 27): libzmq asks it about every connection
// to a socket that has a ZAP domain, during the handshake, and attaches the connection to the
// socket (so that the socket may route a message to it) only when it answers 200. Each stream
// socket has a domain of its own, registered here with its gate; an unknown domain is refused.
//
// libzmq admits a connection without asking when no handler is bound in the context, so the
// handler is bound before any socket with a domain is, and closed only after every one of them.
// The peer's credentials come in the request's address ("<host>:<uid>:<gid>:<pid>", from
// SO_PEERCRED; libzmq also refuses ZMTP 1.0 and 2.0 peers, which skip the handshake, on a socket
// with a domain).
class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in `context` and starts serving. Throws zmq::error_t.
  explicit ZapHandler(zmq::context_t& context);
  ~ZapHandler();  // stops within one poll slice and closes the socket
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  void Register(const std::string& domain, std::shared_ptr<StreamPeerGate> gate);
  void Unregister(const std::string& domain);

 private:
  void Serve();
  // The reply's status code and text for one request's frames.
  std::pair<std::string, std::string> Judge(const std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<StreamPeerGate>> gates_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_ZAP_HANDLER_H_
