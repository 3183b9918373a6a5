#ifndef WSYNC_DAEMON_RENDEZVOUS_TCP_STORE_SERVER_H_
#define WSYNC_DAEMON_RENDEZVOUS_TCP_STORE_SERVER_H_

// A server for PyTorch c10d's TCPStore wire protocol (docs/engines/tcpstore.md), so that
// unmodified torch engine ranks rendezvous with wsyncd as if it were a torch rank 0. It follows the
// libuv server's semantics (VALIDATE first, GET of a missing key answers empty bytes, protocol
// errors close the connection) within bounds a daemon shared by every job on the node needs: one
// event-loop thread for all connections, non-blocking I/O that never runs under a lock the daemon
// takes, a connection limit, handshake/frame/idle deadlines, size caps on every frame, reply and
// the data held, no buffer larger than the bytes that arrived, and only the engines' addresses
// let in.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net.h"
#include "daemon/rendezvous/store_protocol.h"
#include "daemon/rendezvous/store_state.h"

namespace wsync {

class TcpStoreServer {
 public:
  static constexpr uint32_t kValidationMagic = StoreState::kValidationMagic;
  // Connections open on every store of this process (the engines' ranks and wsyncd's own).
  static int OpenConnectionsInProcess();

  struct Options {
    StoreLimits limits;
    // Peer IPs (numeric, as PeerIp gives them) allowed to connect; empty lets any peer in.
    std::set<std::string> allowed_peers;
    // Connections that may be engine ranks at once: the group's engine ranks.
    size_t max_registered = SIZE_MAX;
    // Keys under this prefix name the group; with one, a connection is admitted as an engine
    // rank by naming such a key, not by ADDing "init/" (StoreState::set_rank_prefix).
    std::string rank_prefix;
    // Text the store's log lines never carry (the group's name, which admits a rank), each
    // replaced by the text it maps to.
    std::map<std::string, std::string> log_redactions;
    // Asked for each connection an allowed peer opens, before anything is read from it: a
    // refusal closes it. Runs on the server's one thread, so it must answer quickly.
    std::function<absl::Status(const SocketEnds&)> admit;
  };

  // Why connections were turned away or closed, for diagnosis and tests.
  struct Counters {
    uint64_t refused_peer = 0;     // address not allowed
    uint64_t refused_admit = 0;    // Options::admit refused it
    uint64_t refused_full = 0;     // connection limit reached
    uint64_t refused_no_fds = 0;   // the process ran out of file descriptors
    uint64_t closed_protocol = 0;  // a malformed frame or a broken limit
    uint64_t closed_deadline = 0;  // handshake, frame, reply or idle deadline passed
  };

  // Listens on bind_address:port (port 0 picks one). One server per group instance, so that the
  // shared "init/" counter counts that group's ranks only.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& bind_address,
                                                               uint16_t port, Options options);
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& bind_address,
                                                               uint16_t port);
  ~TcpStoreServer();

  uint16_t port() const { return port_; }

  // Hooks for the daemon; none of them waits on a client.
  absl::Status Set(const std::string& key, std::string value);
  std::optional<std::string> Get(const std::string& key) const;
  size_t ErasePrefix(absl::string_view prefix);
  // The value of the "init/" counter: how many ADDs to it there have been.
  int64_t InitCount() const;
  // Open connections that are engine ranks (StoreState::Registered): the ranks present now.
  size_t RegisteredOpen() const;
  // Open connections that ADDed 1 to "init/": every torch client does when it connects.
  size_t AnnouncedOpen() const;
  // PING nonces (pids) of engine ranks whose connection closed since they registered.
  std::vector<uint32_t> RanksLeft() const;
  // PING nonces (client pids) of validated connections that are open now.
  std::vector<uint32_t> ConnectedPids() const;
  // PING nonces of connections that have fetched the key.
  std::vector<uint32_t> FetchersOf(const std::string& key) const;
  using Adder = StoreState::Adder;
  // Open connections that ADDed to the key; each is identified by a serial unique for the
  // server's life, since PING nonces (pids) may repeat across hosts.
  std::vector<Adder> AddersOf(const std::string& key) const;
  bool ConnectionOpen(uint64_t connection) const;
  // Keys clients waited for that were never published (a mismatched group name, ...).
  std::vector<std::string> UnpublishedWaits() const;
  int connections_open() const;
  Counters counters() const;
  // Why the last connection turned away was refused ("" when none was).
  std::string LastRefusal() const;

 private:
  struct Connection;
  TcpStoreServer(UniqueFd listen_fd, uint16_t port, Options options);

  void Loop();
  void AcceptAll();
  // Turns one accepted socket away, counting and (at most every few seconds) logging why.
  void Refuse(UniqueFd fd, uint64_t Counters::*counter, const std::string& why);
  // Why a connection is to be closed: `why` is logged ("" for a client that just left) and
  // `counter` counted, when set.
  struct Verdict {
    std::string why;
    uint64_t Counters::*counter = nullptr;
  };
  // Each step returns a verdict when the connection must close.
  std::optional<Verdict> Receive(Connection& conn);
  // Runs the whole requests buffered, as long as the client reads its replies.
  std::optional<Verdict> ServeBuffered(Connection& conn);
  std::optional<Verdict> WritePending(Connection& conn);
  // Queues STOP_WAITING for every connection whose WAIT was satisfied (under mu_).
  void QueueWokenLocked();
  void CloseConnection(uint64_t serial, const std::string& why, uint64_t Counters::*counter);
  // `text` with options_.log_redactions applied.
  std::string Redacted(std::string text) const;
  // The earliest deadline of any connection, closing those already past it.
  absl::Time EnforceDeadlines(absl::Time now);
  void Wake();

  const Options options_;
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;   // eventfd: the daemon's hooks woke a waiter, or the server is stopping
  UniqueFd spare_fd_;  // given up to accept-and-close when the process is out of descriptors
  uint16_t port_;
  std::atomic<bool> stopping_{false};
  std::thread loop_thread_;

  // Owned by the loop thread.
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;
  uint64_t next_serial_ = 1;
  absl::Time last_refusal_log_ = absl::InfinitePast();
  absl::Time accept_paused_until_ = absl::InfinitePast();

  mutable std::mutex mu_;  // guards state_ and counters_; never held across I/O
  StoreState state_;
  Counters counters_;
  std::string last_refusal_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RENDEZVOUS_TCP_STORE_SERVER_H_
