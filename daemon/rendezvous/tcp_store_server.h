#ifndef WSYNC_DAEMON_RENDEZVOUS_TCP_STORE_SERVER_H_
#define WSYNC_DAEMON_RENDEZVOUS_TCP_STORE_SERVER_H_

// A server for PyTorch c10d's TCPStore wire protocol (shared/docs/tcpstore-protocol.md), so that
// unmodified torch engine ranks rendezvous with wsyncd as if it were a torch rank 0. It follows the
// libuv server's semantics: VALIDATE first, GET of a missing key answers empty bytes, protocol
// errors close the connection, idle connections are never closed.

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net.h"

namespace wsync {

class TcpStoreServer {
 public:
  static constexpr uint32_t kValidationMagic = 0x3C85F7CE;
  static constexpr size_t kMaxKeyBytes = 8 << 10;
  static constexpr size_t kMaxValueBytes = 8 << 20;
  static constexpr uint64_t kMaxKeysPerRequest = 128 << 10;

  // Listens on bind_address:port (port 0 picks one). One server per group instance, so that the
  // shared "init/" counter counts that group's ranks only.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& bind_address,
                                                               uint16_t port);
  ~TcpStoreServer();

  uint16_t port() const { return port_; }

  // Hooks for the daemon.
  void Set(const std::string& key, std::string value);
  std::optional<std::string> Get(const std::string& key) const;
  size_t ErasePrefix(absl::string_view prefix);
  // The value of the "init/" counter: how many clients have registered.
  int64_t InitCount() const;
  // PING nonces (client pids) of connections that are open now.
  std::vector<uint32_t> ConnectedPids() const;
  // PING nonces of connections that have GET the key.
  std::vector<uint32_t> FetchersOf(const std::string& key) const;
  // A connection that ADDed to a key: its serial (unique for the server's life) and PING nonce.
  struct Adder {
    uint64_t connection = 0;
    uint32_t pid = 0;
  };
  // Connections that have ADDed to the key, open or not.
  std::vector<Adder> AddersOf(const std::string& key) const;
  // Whether the connection with this serial is still open.
  bool ConnectionOpen(uint64_t connection) const;
  // Keys clients waited for that were never published (a mismatched group name, ...).
  std::vector<std::string> UnpublishedWaits() const;
  int connections_open() const;

 private:
  struct Connection;
  explicit TcpStoreServer(UniqueFd listen_fd, uint16_t port)
      : listen_fd_(std::move(listen_fd)), port_(port) {}
  void AcceptLoop();
  void Serve(std::shared_ptr<Connection> conn);
  // Runs one request; false closes the connection.
  bool HandleRequest(Connection& conn, uint8_t command);
  void SetLocked(const std::string& key, std::string value);
  void WakeWaitersLocked();
  bool AllExistLocked(const std::vector<std::string>& keys) const;

  UniqueFd listen_fd_;
  uint16_t port_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;

  mutable std::mutex mu_;
  std::map<std::string, std::string> data_;
  std::list<std::shared_ptr<Connection>> connections_;
  std::map<std::string, std::set<uint32_t>> fetchers_;
  std::map<std::string, std::map<uint64_t, uint32_t>> adders_;  // key -> serial -> pid
  uint64_t next_serial_ = 1;
  std::set<std::string> unpublished_waits_;
  std::list<std::thread> threads_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RENDEZVOUS_TCP_STORE_SERVER_H_
