#ifndef WSYNC_DAEMON_RENDEZVOUS_STORE_STATE_H_
#define WSYNC_DAEMON_RENDEZVOUS_STORE_STATE_H_

// What a TCPStore holds and what it knows of its clients, with torch's semantics for every
// command (docs/engines/tcpstore.md). It does no I/O: the server feeds it parsed requests
// and sends what it returns, so it is tested and fuzzed without sockets. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/rendezvous/store_protocol.h"

namespace wsync {

class StoreState {
 public:
  static constexpr uint32_t kValidationMagic = 0x3C85F7CE;
  // The key every torch store client ADDs to once when it connects.
  static constexpr char kInitKey[] = "init/";

  explicit StoreState(StoreLimits limits) : limits_(std::move(limits)) {}
  // At most this many connections may be engine ranks at once: the group's engine ranks. A
  // further connection that would become one is closed.
  void set_max_registered(size_t n) { max_registered_ = n; }
  // Keys under `prefix` ("/G/", G the group's name) name the group, and only a process wsyncd
  // told the name can name them: with a prefix set, a connection becomes an engine rank the first
  // time one of its requests names such a key (torch's ranks do when they fetch the NCCL id).
  // ADD "init/", which every torch client sends when it connects, then only announces a
  // connection: any local process can send it, so it takes no rank's place. Without a prefix
  // (vLLM's stateless store, whose keys name no group), ADD "init/" registers a rank.
  void set_rank_prefix(std::string prefix) { rank_prefix_ = std::move(prefix); }

  struct Outcome {
    std::string reply;  // may be empty: SET, APPEND, MULTI_SET and a pending WAIT answer nothing
    // Set when the request broke the protocol or a limit: the connection is closed.
    std::string error;
  };

  // Connection lifecycle; `connection` is a serial unique for the store's life.
  void Open(uint64_t connection);
  void Close(uint64_t connection);
  // Runs one request of an open connection. The first must be VALIDATE with torch's magic.
  Outcome Apply(uint64_t connection, const StoreRequest& request);
  // Connections whose pending WAIT was satisfied since the last call; each is owed STOP_WAITING.
  std::vector<uint64_t> TakeWoken();

  // The daemon's side.
  absl::Status Set(const std::string& key, std::string value);
  std::optional<std::string> Get(const std::string& key) const;
  size_t ErasePrefix(absl::string_view prefix);
  int64_t InitCount() const;

  // What the daemon asks about clients.
  std::vector<uint32_t> ConnectedPids() const;
  std::vector<uint32_t> FetchersOf(const std::string& key) const;
  struct Adder {
    uint64_t connection = 0;
    uint32_t pid = 0;
  };
  std::vector<Adder> AddersOf(const std::string& key) const;
  bool ConnectionOpen(uint64_t connection) const;
  // Whether the connection is an engine rank (see set_rank_prefix).
  bool Registered(uint64_t connection) const;
  // Whether the connection is kept however long it stays silent: an engine rank, or, while
  // fewer ranks than the group's are present, a connection that ADDed "init/" (SGLang's ranks
  // name the group only at their first collective, which may come hours after they connected).
  // A pending WAIT is not enough: anyone can wait for a key that never comes.
  bool Holds(uint64_t connection) const;
  // Open connections that are engine ranks.
  size_t registered_open() const { return registered_open_; }
  // Open connections that ADDed "init/": the engine ranks, and anyone else that did.
  size_t announced_open() const;
  // PING nonces (pids) of engine ranks whose connection has closed since they registered; at
  // most kMaxRanksLeft of them.
  std::vector<uint32_t> RanksLeft() const;
  std::vector<std::string> UnpublishedWaits() const;
  int connections_open() const { return static_cast<int>(clients_.size()); }
  size_t data_bytes() const { return data_bytes_; }

 private:
  struct Client {
    bool validated = false;
    bool announced = false;   // ADDed 1 to "init/"
    bool registered = false;  // an engine rank
    uint32_t pid = 0;
    // The keys of the pending WAIT that did not exist when it came; it is answered when the last
    // of them is set.
    std::set<std::string> waiting_for;
    // Keys this connection ADDed to (a few: torch adds "init/" once).
    std::set<std::string> added;
  };
  // Caps on what the store remembers about clients for diagnosis, so that a client looping over
  // keys or reconnecting cannot grow it.
  static constexpr size_t kMaxAddedKeysPerClient = 64;
  static constexpr size_t kMaxFetchersPerKey = 1024;
  static constexpr size_t kMaxUnpublishedWaits = 64;
  static constexpr size_t kMaxRanksLeft = 64;
  // Missing keys the pending WAITs of connections that are not engine ranks wait for together
  // (a torch rank waits for one or two). A rank's WAIT is never refused for what others wait
  // for: there are at most max_registered of them, each with at most max_keys_per_request keys.
  static constexpr size_t kMaxWaitedKeys = 16384;

  Outcome Run(uint64_t connection, Client& client, const StoreRequest& request);
  // Makes the client an engine rank when the request names a key under the rank prefix; the
  // error when every rank's place is taken.
  std::string AdmitByPrefix(Client& client, const StoreRequest& request);
  std::string Register(Client& client);
  bool UnderRankPrefix(const std::string& key) const;
  // Whether the request's reply carries the value of a key the daemon published.
  bool ReadsDaemonKey(const StoreRequest& request) const;
  // Stores key=value within max_data_bytes; the error names the limit.
  absl::Status Put(const std::string& key, std::string value);
  bool AllExist(const std::vector<std::string>& keys) const;
  // A key came into being: answers the WAITs it was the last missing key of.
  void KeyCreated(const std::string& key);
  void DropWait(uint64_t connection, Client& client);
  // Keys the daemon published (the NCCL id): clients may read them, never change them.
  bool DaemonOwned(const std::string& key) const { return daemon_keys_.count(key) != 0; }

  const StoreLimits limits_;
  std::map<std::string, std::string> data_;
  size_t data_bytes_ = 0;
  std::map<uint64_t, Client> clients_;
  std::vector<uint64_t> woken_;
  std::map<std::string, std::set<uint64_t>> waiters_;  // missing key -> connections waiting
  size_t unranked_waited_keys_ = 0;  // what connections that are not ranks wait for
  size_t max_registered_ = SIZE_MAX;
  size_t registered_open_ = 0;
  std::string rank_prefix_;
  std::vector<uint32_t> ranks_left_;
  std::set<std::string> daemon_keys_;
  std::map<std::string, std::set<uint32_t>> fetchers_;
  std::set<std::string> unpublished_waits_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RENDEZVOUS_STORE_STATE_H_
