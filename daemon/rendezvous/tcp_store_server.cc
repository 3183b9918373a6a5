#include "daemon/rendezvous/tcp_store_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

enum Command : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
};

constexpr uint8_t kReady = 0;
constexpr uint8_t kNotReady = 1;
constexpr uint8_t kStopWaiting = 0;
constexpr uint8_t kWaitCanceled = 1;
constexpr char kInitKey[] = "init/";

}  // namespace

// One client connection: a blocking reader thread, an ordered writer and at most one pending WAIT.
struct TcpStoreServer::Connection {
  UniqueFd fd;
  std::mutex write_mu;
  bool validated = false;
  uint64_t serial = 0;  // unique for the server's life: PING nonces (pids) may repeat across hosts
  uint32_t pid = 0;
  std::optional<std::vector<std::string>> pending_wait;  // guarded by the server's mu_
  bool closed = false;

  char buf[64 << 10];
  size_t begin = 0;
  size_t end = 0;

  // Blocking exact read; false on EOF, error or shutdown.
  bool Read(void* dst, size_t n) {
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      if (begin == end) {
        ssize_t r = ::recv(fd.get(), buf, sizeof(buf), 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        begin = 0;
        end = static_cast<size_t>(r);
      }
      size_t take = std::min(n, end - begin);
      std::memcpy(out, buf + begin, take);
      begin += take;
      out += take;
      n -= take;
    }
    return true;
  }
  bool ReadU64(uint64_t* v) { return Read(v, 8); }
  bool ReadBytes(std::string* s, size_t limit) {
    uint64_t n = 0;
    if (!ReadU64(&n) || n > limit) return false;
    s->resize(n);
    return n == 0 || Read(s->data(), n);
  }
  bool Write(const std::string& bytes) {
    std::lock_guard<std::mutex> lock(write_mu);
    return WriteAll(fd.get(), bytes.data(), bytes.size(), absl::Now() + absl::Seconds(30)).ok();
  }
};

namespace {

void AppendU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<char*>(&v), 8); }
void AppendBytes(std::string* out, const std::string& s) {
  AppendU64(out, s.size());
  out->append(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const std::string& bind_address, uint16_t port) {
  WSYNC_ASSIGN_OR_RETURN(UniqueFd fd, ListenTcp(bind_address, port));
  WSYNC_ASSIGN_OR_RETURN(uint16_t bound, LocalPort(fd.get()));
  auto server = std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(fd), bound));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& conn : connections_) ::shutdown(conn->fd.get(), SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TcpStoreServer::AcceptLoop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    auto conn = std::make_shared<Connection>();
    conn->fd.reset(fd);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) break;
    conn->serial = next_serial_++;
    connections_.push_back(conn);
    threads_.emplace_back([this, conn] { Serve(conn); });
  }
}

void TcpStoreServer::Serve(std::shared_ptr<Connection> conn) {
  uint8_t command = 0;
  while (conn->Read(&command, 1)) {
    if (!HandleRequest(*conn, command)) {
      WSYNC_LOG(Warning, "store :", port_, ": closing connection of pid ", conn->pid,
                " after a protocol error (command ", static_cast<int>(command), ")");
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  conn->closed = true;
  conn->pending_wait.reset();
  ::shutdown(conn->fd.get(), SHUT_RDWR);
  connections_.remove(conn);
}

bool TcpStoreServer::AllExistLocked(const std::vector<std::string>& keys) const {
  for (const std::string& k : keys) {
    if (data_.count(k) == 0) return false;
  }
  return true;
}

void TcpStoreServer::WakeWaitersLocked() {
  for (auto& conn : connections_) {
    if (conn->pending_wait && AllExistLocked(*conn->pending_wait)) {
      conn->pending_wait.reset();
      conn->Write(std::string(1, static_cast<char>(kStopWaiting)));
    }
  }
}

void TcpStoreServer::SetLocked(const std::string& key, std::string value) {
  data_[key] = std::move(value);
  unpublished_waits_.erase(key);
}

bool TcpStoreServer::HandleRequest(Connection& conn, uint8_t command) {
  if (!conn.validated) {
    // The first request must be VALIDATE with torch's magic; anything else is not a torch client.
    uint32_t magic = 0;
    if (command != kValidate || !conn.Read(&magic, 4) || magic != kValidationMagic) return false;
    conn.validated = true;
    return true;
  }
  std::string key, value, expected;
  std::string reply;
  switch (command) {
    case kValidate:
      return false;  // a second VALIDATE is a protocol error
    case kPing: {
      uint32_t nonce = 0;
      if (!conn.Read(&nonce, 4)) return false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        conn.pid = nonce;
      }
      return conn.Write(std::string(reinterpret_cast<char*>(&nonce), 4));
    }
    case kSet: {
      if (!conn.ReadBytes(&key, kMaxKeyBytes) || !conn.ReadBytes(&value, kMaxValueBytes)) {
        return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      WSYNC_LOG(Debug, "store :", port_, ": SET ", key, " (", value.size(), " bytes) by pid ",
                conn.pid);
      SetLocked(key, std::move(value));
      WakeWaitersLocked();
      return true;
    }
    case kCompareSet: {
      std::string desired;
      if (!conn.ReadBytes(&key, kMaxKeyBytes) || !conn.ReadBytes(&expected, kMaxValueBytes) ||
          !conn.ReadBytes(&desired, kMaxValueBytes)) {
        return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (expected.empty()) {
          SetLocked(key, desired);
          AppendBytes(&reply, desired);
          WakeWaitersLocked();
        } else {
          AppendBytes(&reply, expected);
        }
      } else {
        if (it->second == expected) it->second = desired;
        AppendBytes(&reply, it->second);
      }
      return conn.Write(reply);
    }
    case kGet: {
      if (!conn.ReadBytes(&key, kMaxKeyBytes)) return false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = data_.find(key);
        AppendBytes(&reply, it == data_.end() ? std::string() : it->second);
        fetchers_[key].insert(conn.pid);
        WSYNC_LOG(Debug, "store :", port_, ": GET ", key, " by pid ", conn.pid,
                  it == data_.end() ? " (missing)" : "");
      }
      return conn.Write(reply);
    }
    case kAdd: {
      int64_t delta = 0;
      if (!conn.ReadBytes(&key, kMaxKeyBytes) || !conn.Read(&delta, 8)) return false;
      std::lock_guard<std::mutex> lock(mu_);
      int64_t current = 0;
      auto it = data_.find(key);
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) return false;
      current += delta;
      SetLocked(key, std::to_string(current));
      adders_[key][conn.serial] = conn.pid;
      WSYNC_LOG(Debug, "store :", port_, ": ADD ", key, " ", delta, " -> ", current, " by pid ",
                conn.pid);
      WakeWaitersLocked();
      reply.append(reinterpret_cast<char*>(&current), 8);
      return conn.Write(reply);
    }
    case kCheck:
    case kWait:
    case kMultiGet: {
      uint64_t n = 0;
      if (!conn.ReadU64(&n) || n > kMaxKeysPerRequest) return false;
      std::vector<std::string> keys(n);
      for (auto& k : keys) {
        if (!conn.ReadBytes(&k, kMaxKeyBytes)) return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (command == kCheck) {
        return conn.Write(
            std::string(1, static_cast<char>(AllExistLocked(keys) ? kReady : kNotReady)));
      }
      if (command == kMultiGet) {
        for (const auto& k : keys) {
          auto it = data_.find(k);
          AppendBytes(&reply, it == data_.end() ? std::string() : it->second);
          fetchers_[k].insert(conn.pid);
        }
        return conn.Write(reply);
      }
      if (AllExistLocked(keys)) {
        return conn.Write(std::string(1, static_cast<char>(kStopWaiting)));
      }
      for (const auto& k : keys) {
        if (data_.count(k) == 0 && unpublished_waits_.insert(k).second) {
          WSYNC_LOG(Info, "store :", port_, ": pid ", conn.pid, " waits for unpublished key '", k,
                    "'");
        }
      }
      conn.pending_wait = std::move(keys);
      return true;
    }
    case kGetNumKeys: {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t n = static_cast<int64_t>(data_.size());
      reply.append(reinterpret_cast<char*>(&n), 8);
      return conn.Write(reply);
    }
    case kDeleteKey: {
      if (!conn.ReadBytes(&key, kMaxKeyBytes)) return false;
      std::lock_guard<std::mutex> lock(mu_);
      int64_t deleted = static_cast<int64_t>(data_.erase(key));
      reply.append(reinterpret_cast<char*>(&deleted), 8);
      return conn.Write(reply);
    }
    case kAppend: {
      if (!conn.ReadBytes(&key, kMaxKeyBytes) || !conn.ReadBytes(&value, kMaxValueBytes)) {
        return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      auto it = data_.find(key);
      if (it == data_.end()) {
        SetLocked(key, std::move(value));
      } else {
        it->second.append(value);
      }
      WakeWaitersLocked();
      return true;
    }
    case kMultiSet: {
      uint64_t n = 0;
      if (!conn.ReadU64(&n) || n > kMaxKeysPerRequest) return false;
      std::vector<std::pair<std::string, std::string>> kvs(n);
      for (auto& [k, v] : kvs) {
        if (!conn.ReadBytes(&k, kMaxKeyBytes) || !conn.ReadBytes(&v, kMaxValueBytes)) {
          return false;
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [k, v] : kvs) SetLocked(k, std::move(v));
      WakeWaitersLocked();
      return true;
    }
    case kCancelWait: {
      std::lock_guard<std::mutex> lock(mu_);
      conn.pending_wait.reset();
      return conn.Write(std::string(1, static_cast<char>(kWaitCanceled)));
    }
    default:
      return false;  // unknown command (queues 14-16 are not served)
  }
}

void TcpStoreServer::Set(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  SetLocked(key, std::move(value));
  WakeWaitersLocked();
}

std::optional<std::string> TcpStoreServer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

size_t TcpStoreServer::ErasePrefix(absl::string_view prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto it = data_.lower_bound(std::string(prefix)); it != data_.end();) {
    if (!absl::StartsWith(it->first, prefix)) break;
    it = data_.erase(it);
    ++n;
  }
  return n;
}

int64_t TcpStoreServer::InitCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(kInitKey);
  int64_t n = 0;
  if (it != data_.end()) (void)absl::SimpleAtoi(it->second, &n);
  return n;
}

std::vector<uint32_t> TcpStoreServer::ConnectedPids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> pids;
  for (const auto& c : connections_) {
    if (c->validated && !c->closed) pids.push_back(c->pid);
  }
  return pids;
}

std::vector<uint32_t> TcpStoreServer::FetchersOf(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fetchers_.find(key);
  if (it == fetchers_.end()) return {};
  return std::vector<uint32_t>(it->second.begin(), it->second.end());
}

std::vector<TcpStoreServer::Adder> TcpStoreServer::AddersOf(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Adder> out;
  auto it = adders_.find(key);
  if (it == adders_.end()) return out;
  for (const auto& [serial, pid] : it->second) out.push_back(Adder{serial, pid});
  return out;
}

bool TcpStoreServer::ConnectionOpen(uint64_t connection) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& c : connections_) {
    if (c->serial == connection) return !c->closed;
  }
  return false;
}

std::vector<std::string> TcpStoreServer::UnpublishedWaits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::string>(unpublished_waits_.begin(), unpublished_waits_.end());
}

int TcpStoreServer::connections_open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(connections_.size());
}

}  // namespace wsync
