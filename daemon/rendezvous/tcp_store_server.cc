#include "daemon/rendezvous/tcp_store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

constexpr char kStopWaiting = 0;
// A connection is not read while this much of its replies is unsent: a torch client reads each
// reply before its next request, so only a client that stopped reading gets here.
constexpr size_t kMaxUnsentBeforeReading = 64 << 10;
constexpr size_t kReadChunk = 64 << 10;
constexpr int kMaxRequestsPerTurn = 64;

// Store connections open in this process, across every group's store: together they may use a
// quarter of the descriptor limit, so that the gRPC listener and the engines' HTTP channels always
// have descriptors left.
std::atomic<int> g_open_connections{0};

}  // namespace

int TcpStoreServer::OpenConnectionsInProcess() { return g_open_connections.load(); }

namespace {

int ProcessConnectionBudget() {
  static const int budget = [] {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
    return std::max<int>(32, static_cast<int>(rl.rlim_cur / 4));
  }();
  return budget;
}

bool SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

}  // namespace

struct TcpStoreServer::Connection {
  UniqueFd fd;
  uint64_t serial = 0;
  std::string peer;
  std::string in;  // bytes received and not yet consumed, from in_begin
  size_t in_begin = 0;
  size_t need = 1;  // in.size() - in_begin below which parsing cannot advance
  std::string out;  // replies not yet sent, from out_begin
  size_t out_begin = 0;
  bool validated = false;
  absl::Time opened;
  absl::Time frame_started = absl::InfiniteFuture();  // first byte of an unfinished request
  absl::Time last_request;
  absl::Time out_progress;  // last time unsent replies moved

  size_t buffered() const { return in.size() - in_begin; }
  size_t unsent() const { return out.size() - out_begin; }
  void Queue(absl::string_view bytes, absl::Time now) {
    if (unsent() == 0) out_progress = now;
    out.append(bytes.data(), bytes.size());
  }
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const std::string& bind_address, uint16_t port) {
  return Start(bind_address, port, Options());
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const std::string& bind_address, uint16_t port, Options options) {
  WSYNC_ASSIGN_OR_RETURN(UniqueFd fd, ListenTcp(bind_address, port));
  WSYNC_ASSIGN_OR_RETURN(uint16_t bound, LocalPort(fd.get()));
  if (!SetNonBlocking(fd.get())) return absl::InternalError("cannot make the store non-blocking");
  auto server =
      std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(fd), bound, std::move(options)));
  if (!server->wake_fd_.valid()) return absl::InternalError("eventfd failed");
  server->loop_thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

TcpStoreServer::TcpStoreServer(UniqueFd listen_fd, uint16_t port, Options options)
    : options_(std::move(options)),
      listen_fd_(std::move(listen_fd)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      spare_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)),
      port_(port),
      state_(options_.limits) {
  state_.set_max_registered(options_.max_registered);
  state_.set_rank_prefix(options_.rank_prefix);
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  Wake();
  if (loop_thread_.joinable()) loop_thread_.join();
  g_open_connections -= static_cast<int>(connections_.size());
}

void TcpStoreServer::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void TcpStoreServer::Loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> serials;
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time next_deadline = EnforceDeadlines(now);
    if (accept_paused_until_ > now) next_deadline = std::min(next_deadline, accept_paused_until_);
    fds.clear();
    serials.clear();
    fds.push_back(
        {listen_fd_.get(), static_cast<short>(now >= accept_paused_until_ ? POLLIN : 0), 0});
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    bool more_to_serve = false;  // requests left over by the per-turn cap
    for (auto& [serial, conn] : connections_) {
      if (conn->buffered() >= conn->need && conn->unsent() < kMaxUnsentBeforeReading) {
        more_to_serve = true;
      }
      short events = 0;
      if (conn->unsent() < kMaxUnsentBeforeReading) events |= POLLIN;
      if (conn->unsent() > 0) events |= POLLOUT;
      fds.push_back({conn->fd.get(), events, 0});
      serials.push_back(serial);
    }
    const int64_t wait_ms =
        more_to_serve
            ? 0
            : std::clamp<int64_t>(absl::ToInt64Milliseconds(next_deadline - now) + 1, 0, 1000);
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0 && errno != EINTR) {
      WSYNC_LOG(Error, "store :", port_, ": poll failed: ", std::strerror(errno));
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      (void)!::read(wake_fd_.get(), &count, sizeof(count));
      std::lock_guard<std::mutex> lock(mu_);
      QueueWokenLocked();
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      auto it = connections_.find(serials[i - 2]);
      if (it == connections_.end()) continue;
      Connection& conn = *it->second;
      std::optional<Verdict> verdict;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) verdict = Receive(conn);
      if (!verdict) verdict = ServeBuffered(conn);
      if (!verdict) verdict = WritePending(conn);
      // Requests held back while replies were unsent run once those are gone.
      if (!verdict && conn.unsent() == 0 && conn.buffered() >= conn.need) {
        verdict = ServeBuffered(conn);
        if (!verdict) verdict = WritePending(conn);
      }
      if (verdict) CloseConnection(conn.serial, verdict->why, verdict->counter);
    }
    if (fds[0].revents & POLLIN) AcceptAll();
  }
  while (!connections_.empty()) CloseConnection(connections_.begin()->first, "", nullptr);
}

void TcpStoreServer::AcceptAll() {
  for (int i = 0; i < 64; ++i) {
    int raw = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (raw < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: accept with the spare one and close it at once, so the pending
        // connection does not leave the listener readable forever (a busy loop). With no spare
        // left either, stop listening for a moment instead.
        spare_fd_.reset();
        UniqueFd victim(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        const bool shed = victim.valid();
        if (shed)
          Refuse(std::move(victim), &Counters::refused_no_fds, "the process is out of files");
        spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!shed) {
          accept_paused_until_ = absl::Now() + absl::Milliseconds(100);
          return;
        }
        continue;
      }
      return;  // EAGAIN, or an error of one connection that is gone
    }
    UniqueFd fd(raw);
    auto peer = PeerIp(fd.get());
    if (!peer.ok()) continue;
    if (!options_.allowed_peers.empty() && options_.allowed_peers.count(*peer) == 0) {
      Refuse(std::move(fd), &Counters::refused_peer,
             absl::StrCat(*peer, " is not one of the group's engine addresses"));
      continue;
    }
    if (static_cast<int>(connections_.size()) >= options_.limits.max_connections ||
        g_open_connections.load() >= ProcessConnectionBudget()) {
      Refuse(std::move(fd), &Counters::refused_full,
             absl::StrCat("connection limit reached (", connections_.size(), " open here, ",
                          g_open_connections.load(), " in the process)"));
      continue;
    }
    if (options_.admit) {
      auto ends = SocketEndsOf(fd.get());
      const absl::Status admitted = ends.ok() ? options_.admit(*ends) : ends.status();
      if (!admitted.ok()) {
        Refuse(std::move(fd), &Counters::refused_admit, std::string(admitted.message()));
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    auto conn = std::make_unique<Connection>();
    conn->fd = std::move(fd);
    conn->serial = next_serial_++;
    conn->peer = *peer;
    conn->opened = conn->last_request = absl::Now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_.Open(conn->serial);
    }
    ++g_open_connections;
    connections_.emplace(conn->serial, std::move(conn));
  }
}

void TcpStoreServer::Refuse(UniqueFd fd, uint64_t Counters::*counter, const std::string& why) {
  uint64_t total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    total = ++(counters_.*counter);
    last_refusal_ = why;
  }
  fd.reset();  // after counting, so a client that sees the close also sees the count
  const absl::Time now = absl::Now();
  if (now - last_refusal_log_ >= absl::Seconds(5)) {
    last_refusal_log_ = now;
    WSYNC_LOG(Warning, "store :", port_, ": refused a connection: ", why, " (", total,
              " refused for this reason so far)");
  }
}

std::optional<TcpStoreServer::Verdict> TcpStoreServer::Receive(Connection& conn) {
  char chunk[kReadChunk];
  // One chunk per turn, so one fast client cannot starve the others.
  ssize_t r = ::recv(conn.fd.get(), chunk, sizeof(chunk), 0);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return std::nullopt;
    return Verdict{};
  }
  if (r == 0) return Verdict{};  // the client closed
  if (conn.buffered() == 0) conn.frame_started = absl::Now();
  conn.in.append(chunk, static_cast<size_t>(r));
  return std::nullopt;
}

std::optional<TcpStoreServer::Verdict> TcpStoreServer::ServeBuffered(Connection& conn) {
  const absl::Time now = absl::Now();
  if (!conn.validated && conn.buffered() > 0 &&
      conn.in[conn.in_begin] != static_cast<char>(StoreCommand::kValidate)) {
    // Not a torch client: refuse on the first byte instead of waiting for a whole frame.
    return Verdict{"the first request is not VALIDATE", &Counters::closed_protocol};
  }
  // A bounded number of requests per turn, so one client's pipeline cannot hold the loop.
  for (int served = 0; served < kMaxRequestsPerTurn && conn.buffered() >= conn.need &&
                       conn.unsent() < kMaxUnsentBeforeReading;
       ++served) {
    StoreParse parse =
        ParseStoreRequest(absl::string_view(conn.in).substr(conn.in_begin), options_.limits);
    if (parse.kind == StoreParse::kNeedMore) {
      conn.need = parse.need;
      break;
    }
    if (parse.kind == StoreParse::kMalformed) {
      return Verdict{std::move(parse.error), &Counters::closed_protocol};
    }
    conn.in_begin += parse.consumed;
    conn.need = 1;
    conn.last_request = now;
    conn.frame_started = conn.buffered() > 0 ? now : absl::InfiniteFuture();
    StoreState::Outcome outcome;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // STOP_WAITING owed from the daemon's own SETs goes out before this request's reply.
      QueueWokenLocked();
      outcome = state_.Apply(conn.serial, parse.request);
      if (outcome.error.empty()) {
        conn.Queue(outcome.reply, now);
        QueueWokenLocked();
      }
    }
    if (!outcome.error.empty()) {
      return Verdict{std::move(outcome.error), &Counters::closed_protocol};
    }
    conn.validated = true;
  }
  if (conn.in_begin > 0 && conn.in_begin >= conn.in.size() / 2) {
    conn.in.erase(0, conn.in_begin);
    conn.in_begin = 0;
  }
  if (conn.in.empty()) conn.in.shrink_to_fit();
  return std::nullopt;
}

std::optional<TcpStoreServer::Verdict> TcpStoreServer::WritePending(Connection& conn) {
  while (conn.unsent() > 0) {
    ssize_t w =
        ::send(conn.fd.get(), conn.out.data() + conn.out_begin, conn.unsent(), MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return std::nullopt;
      return Verdict{};
    }
    conn.out_begin += static_cast<size_t>(w);
    conn.out_progress = absl::Now();
  }
  conn.out.clear();
  conn.out.shrink_to_fit();
  conn.out_begin = 0;
  return std::nullopt;
}

void TcpStoreServer::QueueWokenLocked() {
  const absl::Time now = absl::Now();
  for (uint64_t serial : state_.TakeWoken()) {
    auto it = connections_.find(serial);
    if (it != connections_.end()) it->second->Queue(std::string(1, kStopWaiting), now);
  }
}

void TcpStoreServer::CloseConnection(uint64_t serial, const std::string& why,
                                     uint64_t Counters::*counter) {
  auto it = connections_.find(serial);
  if (it == connections_.end()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.Close(serial);
    if (counter != nullptr) ++(counters_.*counter);
  }
  if (!why.empty()) {
    WSYNC_LOG(Warning, "store :", port_, ": closing the connection from ", it->second->peer, ": ",
              Redacted(why));
  }
  --g_open_connections;
  connections_.erase(it);
}

absl::Time TcpStoreServer::EnforceDeadlines(absl::Time now) {
  const StoreLimits& l = options_.limits;
  absl::Time next = now + absl::Seconds(1);
  std::vector<std::pair<uint64_t, std::string>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [serial, conn] : connections_) {
      std::vector<std::pair<absl::Time, std::string>> deadlines;
      if (!conn->validated) {
        deadlines.emplace_back(conn->opened + l.handshake_timeout, "no VALIDATE in time");
      }
      if (conn->buffered() > 0) {
        deadlines.emplace_back(conn->frame_started + l.frame_timeout,
                               absl::StrCat("a request stayed incomplete for ",
                                            absl::FormatDuration(l.frame_timeout)));
      }
      if (conn->unsent() > 0) {
        deadlines.emplace_back(conn->out_progress + l.frame_timeout,
                               "the client stopped reading its replies");
      }
      if (conn->validated && conn->buffered() == 0 && conn->unsent() == 0 &&
          !state_.Holds(serial)) {
        deadlines.emplace_back(conn->last_request + l.idle_timeout, "idle, and not an engine rank");
      }
      for (auto& [when, why] : deadlines) {
        if (when <= now) {
          expired.emplace_back(serial, why);
          break;
        }
        next = std::min(next, when);
      }
    }
  }
  for (auto& [serial, why] : expired) CloseConnection(serial, why, &Counters::closed_deadline);
  return next;
}

absl::Status TcpStoreServer::Set(const std::string& key, std::string value) {
  absl::Status s;
  bool woke = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = state_.Set(key, std::move(value));
    woke = s.ok();
  }
  if (woke) Wake();
  return s;
}

std::optional<std::string> TcpStoreServer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.Get(key);
}

size_t TcpStoreServer::ErasePrefix(absl::string_view prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.ErasePrefix(prefix);
}

size_t TcpStoreServer::RegisteredOpen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.registered_open();
}

size_t TcpStoreServer::AnnouncedOpen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.announced_open();
}

std::vector<uint32_t> TcpStoreServer::RanksLeft() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.RanksLeft();
}

std::string TcpStoreServer::Redacted(std::string text) const {
  for (const auto& [hidden, shown] : options_.log_redactions) {
    if (!hidden.empty()) text = absl::StrReplaceAll(text, {{hidden, shown}});
  }
  return text;
}

int64_t TcpStoreServer::InitCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.InitCount();
}

std::vector<uint32_t> TcpStoreServer::ConnectedPids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.ConnectedPids();
}

std::vector<uint32_t> TcpStoreServer::FetchersOf(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.FetchersOf(key);
}

std::vector<TcpStoreServer::Adder> TcpStoreServer::AddersOf(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.AddersOf(key);
}

bool TcpStoreServer::ConnectionOpen(uint64_t connection) const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.ConnectionOpen(connection);
}

std::vector<std::string> TcpStoreServer::UnpublishedWaits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.UnpublishedWaits();
}

int TcpStoreServer::connections_open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.connections_open();
}

std::string TcpStoreServer::LastRefusal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_refusal_;
}

TcpStoreServer::Counters TcpStoreServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace wsync
