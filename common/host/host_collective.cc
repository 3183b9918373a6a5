#include "common/host/host_collective.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

constexpr char kMagic[] = "WSYNCHC1";
constexpr size_t kMagicLen = 8;
constexpr size_t kTokenLen = 16;
constexpr size_t kHelloLen = kMagicLen + kTokenLen + 8;

void PutU32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void PutU64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string RandomToken() {
  std::random_device rd;
  std::string token(kTokenLen, '\0');
  for (size_t i = 0; i < kTokenLen; i += 4) {
    uint32_t r = rd();
    std::memcpy(&token[i], &r, 4);
  }
  return token;
}

}  // namespace

std::string HostCollectiveId::Encode() const {
  std::string id(kUniqueIdBytes, '\0');
  std::memcpy(&id[0], kMagic, kMagicLen);
  std::memcpy(&id[8], &port, 2);
  std::memcpy(&id[10], token.data(), kTokenLen);
  id[26] = static_cast<char>(address.size());
  std::memcpy(&id[27], address.data(), address.size());
  return id;
}

absl::StatusOr<HostCollectiveId> HostCollectiveId::Decode(absl::string_view bytes) {
  if (bytes.size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("unique id must be ", kUniqueIdBytes, " bytes, got ", bytes.size()));
  }
  if (bytes.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return absl::InvalidArgumentError(
        "unique id is not a wsync host-collective id (is the daemon running in CUDA mode?)");
  }
  HostCollectiveId id;
  std::memcpy(&id.port, bytes.data() + 8, 2);
  id.token = std::string(bytes.substr(10, kTokenLen));
  size_t len = static_cast<unsigned char>(bytes[26]);
  if (len == 0 || 27 + len > kUniqueIdBytes) {
    return absl::InvalidArgumentError("unique id has a bad address length");
  }
  id.address = std::string(bytes.substr(27, len));
  return id;
}

absl::StatusOr<std::unique_ptr<HostRootCommunicator>> HostRootCommunicator::Create(
    const std::string& bind_address, const std::string& advertise_address, int world_size) {
  if (world_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size must be at least 2, got ", world_size));
  }
  if (advertise_address.empty() || advertise_address.size() > 100) {
    return absl::InvalidArgumentError("advertise address must be 1..100 characters");
  }
  WSYNC_ASSIGN_OR_RETURN(UniqueFd fd, ListenTcp(bind_address, 0));
  WSYNC_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd.get()));
  HostCollectiveId id{advertise_address, port, RandomToken()};
  auto comm = std::unique_ptr<HostRootCommunicator>(
      new HostRootCommunicator(std::move(fd), world_size, id.Encode(), id.token));
  comm->accept_thread_ = std::thread([c = comm.get()] { c->AcceptLoop(); });
  comm->send_thread_ = std::thread([c = comm.get()] { c->SendLoop(); });
  return comm;
}

HostRootCommunicator::HostRootCommunicator(UniqueFd listen_fd, int world_size,
                                           std::string unique_id, std::string token)
    : listen_fd_(std::move(listen_fd)),
      world_size_(world_size),
      unique_id_(std::move(unique_id)),
      token_(std::move(token)) {}

HostRootCommunicator::~HostRootCommunicator() {
  Abort("communicator destroyed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    jobs_cv_.notify_all();
  }
  if (send_thread_.joinable()) send_thread_.join();
  if (accept_thread_.joinable()) accept_thread_.join();
}

void HostRootCommunicator::AcceptLoop() {
  while (!aborted_) {
    pollfd pfd{listen_fd_.get(), POLLIN, 0};
    int rc = ::poll(&pfd, 1, 100);
    if (rc <= 0) continue;
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    TuneSocket(fd);
    Handshake(UniqueFd(fd));
  }
}

void HostRootCommunicator::Handshake(UniqueFd fd) {
  char hello[kHelloLen];
  absl::Status s = ReadExact(fd.get(), hello, sizeof(hello), absl::Now() + absl::Seconds(5));
  if (!s.ok()) {
    WSYNC_LOG(Warning, "host collective: dropped a peer during its hello: ", s.message());
    return;
  }
  const bool magic_ok = std::memcmp(hello, kMagic, kMagicLen) == 0;
  const bool token_ok = std::memcmp(hello + kMagicLen, token_.data(), kTokenLen) == 0;
  const int rank = static_cast<int>(GetU32(hello + kMagicLen + kTokenLen));
  const int world = static_cast<int>(GetU32(hello + kMagicLen + kTokenLen + 4));
  std::string problem;
  std::lock_guard<std::mutex> lock(mu_);
  if (!magic_ok || !token_ok) {
    problem = "wrong magic or token (a stale id from an earlier group?)";
  } else if (world != world_size_) {
    problem = absl::StrCat("peer says world size ", world, ", group has ", world_size_);
  } else if (rank < 1 || rank >= world_size_) {
    problem = absl::StrCat("rank ", rank, " is outside 1..", world_size_ - 1);
  } else if (peers_.count(rank) != 0) {
    problem = absl::StrCat("rank ", rank, " joined twice");
  }
  char verdict = problem.empty() ? 0 : 1;
  (void)WriteAll(fd.get(), &verdict, 1, absl::Now() + absl::Seconds(5));
  if (!problem.empty()) {
    WSYNC_LOG(Warning, "host collective: refused a peer: ", problem);
    return;
  }
  peers_.emplace(rank, std::move(fd));
  joined_cv_.notify_all();
}

std::vector<int> HostRootCommunicator::JoinedRanks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> ranks;
  for (const auto& [rank, fd] : peers_) ranks.push_back(rank);
  return ranks;
}

absl::Status HostRootCommunicator::WaitForPeers(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (static_cast<int>(peers_.size()) < world_size_ - 1) {
    if (aborted_) return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      for (int r = 1; r < world_size_; ++r) {
        if (peers_.count(r) == 0) missing.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "ranks ", absl::StrJoin(missing, ","), " of ", world_size_,
          " never joined the collective (they did not fetch the unique id from the store or "
          "could not reach ",
          Describe(), ")"));
    }
    joined_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HostRootCommunicator::StartBroadcastFrom(
    SlotMemory& slot, const void* base, const std::vector<BroadcastPiece>& pieces,
    absl::Time deadline) {
  if (slot.kind() != MemoryKind::kHostShm) {
    return absl::FailedPreconditionError("the host collective can only send host-memory slots");
  }
  Job job{0, {}, deadline};
  for (const BroadcastPiece& p : pieces) {
    job.pieces.emplace_back(static_cast<const char*>(base) + p.offset, p.bytes());
  }
  WSYNC_RETURN_IF_ERROR(WaitForPeers(deadline));
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
  job.ticket = next_ticket_++;
  const uint64_t ticket = job.ticket;
  unwaited_.insert(ticket);
  jobs_.push_back(std::move(job));
  jobs_cv_.notify_all();
  return ticket;
}

absl::Status HostRootCommunicator::WarmUpAllReduce(absl::Time deadline) {
  WSYNC_RETURN_IF_ERROR(WaitForPeers(deadline));
  std::vector<std::pair<int, int>> fds;  // rank, socket
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!jobs_.empty() || next_ticket_ != 0) {
      return absl::FailedPreconditionError("the warm-up all-reduce must precede every broadcast");
    }
    for (const auto& [rank, fd] : peers_) fds.emplace_back(rank, fd.get());
  }
  float sum = 0;
  for (const auto& [rank, fd] : fds) {
    float value = 0;
    if (absl::Status s = ReadExact(fd, &value, sizeof(value), deadline); !s.ok()) {
      Abort("warm-up all-reduce failed");
      return absl::Status(s.code(), absl::StrCat("rank ", rank,
                                                 " never joined the warm-up "
                                                 "all-reduce: ",
                                                 s.message()));
    }
    sum += value;
  }
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
    warm_up_sum_ = sum;
    ticket = next_ticket_++;
    unwaited_.insert(ticket);
    jobs_.push_back(
        Job{ticket, {{reinterpret_cast<const char*>(&warm_up_sum_), sizeof(float)}}, deadline});
    jobs_cv_.notify_all();
  }
  return WaitBroadcast(ticket, deadline).status();
}

void HostRootCommunicator::SendLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    jobs_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const absl::Time start = absl::Now();
    absl::Status status;
    for (const auto& [data, bytes] : job.pieces) {
      status = SendToAll(data, bytes, job.deadline);
      if (!status.ok()) break;
    }
    const absl::Time end = absl::Now();
    lock.lock();
    if (status.ok()) {
      WireTiming timing;
      if (last_end_ != absl::InfinitePast() && start > last_end_) {
        timing.idle_seconds = absl::ToDoubleSeconds(start - last_end_);
      }
      timing.wire_seconds = absl::ToDoubleSeconds(end - start);
      done_.emplace(job.ticket, timing);
    } else {
      done_.emplace(job.ticket, status);
    }
    last_end_ = end;
    jobs_cv_.notify_all();
  }
}

absl::StatusOr<WireTiming> HostRootCommunicator::WaitBroadcast(uint64_t ticket,
                                                               absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (unwaited_.erase(ticket) == 0) {
    return absl::InvalidArgumentError("no such broadcast ticket, or it was already waited");
  }
  // A job's own deadline makes the sender report which ranks are stuck; the grace lets that
  // message, rather than this generic one, reach the caller.
  const absl::Time give_up = deadline + absl::Milliseconds(500);
  while (done_.count(ticket) == 0) {
    if (absl::Now() >= give_up) {
      lock.unlock();
      // The sender is stuck on a peer; aborting it makes its SendToAll return.
      Abort("broadcast deadline passed");
      return absl::DeadlineExceededError(
          absl::StrCat("broadcast ", ticket, " did not leave rank 0 before its deadline"));
    }
    jobs_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  absl::StatusOr<WireTiming> result = std::move(done_[ticket]);
  done_.erase(ticket);
  return result;
}

absl::Status HostRootCommunicator::SendToAll(const char* data, uint64_t bytes,
                                             absl::Time deadline) {
  struct Stream {
    int rank;
    int fd;
    uint64_t sent = 0;  // over header + payload
  };
  char header[16];
  std::vector<Stream> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PutU64(header, sequence_++);
    PutU64(header + 8, bytes);
    for (const auto& [rank, fd] : peers_) streams.push_back(Stream{rank, fd.get()});
  }
  const uint64_t total = sizeof(header) + bytes;
  constexpr uint64_t kChunk = 4u << 20;
  // Poll only sockets whose buffer is full (their last send said EAGAIN): POLLOUT then wakes the
  // loop as soon as a peer drains. When nothing is left to send the loop returns at once; it never
  // polls an empty set (that would only sleep out the timeout). The timeout bounds how late the
  // deadline and the abort flag are noticed; Abort also shuts the sockets down, which wakes poll.
  constexpr absl::Duration kPollCap = absl::Milliseconds(100);
  // This thread holds no lock here, and the reason is written after aborted_ turns true: it is
  // read under mu_, as Abort writes it.
  auto aborted_error = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::AbortedError(absl::StrCat("communicator aborted: ", abort_reason_));
  };
  std::vector<pollfd> blocked;
  while (true) {
    if (aborted_) return aborted_error();
    blocked.clear();
    for (Stream& s : streams) {
      while (s.sent < total) {
        const char* p;
        uint64_t n;
        if (s.sent < sizeof(header)) {
          p = header + s.sent;
          n = sizeof(header) - s.sent;
        } else {
          p = data + (s.sent - sizeof(header));
          n = std::min(kChunk, total - s.sent);
        }
        ssize_t w = ::send(s.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
          s.sent += static_cast<uint64_t>(w);
          continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EFAULT) {
          // The kernel could not read the bytes: host mode's memory is a trainer's to truncate
          // (a slot, or a pull source read in place), and a read past its new end fails here,
          // where wsyncd's own reads would raise SIGBUS. The peers got part of a broadcast, so
          // the collective is out of step for good.
          const std::string what = absl::StrCat(
              "a broadcast of ", bytes, " bytes could not read its memory after ",
              s.sent > sizeof(header) ? s.sent - sizeof(header) : 0, " bytes went to rank ", s.rank,
              ": it shrank under wsyncd (a trainer truncated its shared memory)");
          Abort(what);
          return absl::DataLossError(what);
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          if (aborted_) return aborted_error();
          // A peer that closed its end (EPIPE, ECONNRESET) is a receiving process that died or
          // restarted: said so, since this error can arrive before the engine's own HTTP reply
          // shows it.
          const bool gone = errno == EPIPE || errno == ECONNRESET;
          return absl::UnavailableError(absl::StrCat(
              "rank ", s.rank, " failed during a broadcast of ", bytes,
              " bytes: ", std::strerror(errno), gone ? " (its process died or restarted)" : ""));
        }
        blocked.push_back(pollfd{s.fd, POLLOUT, 0});
        break;
      }
    }
    if (blocked.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      std::vector<std::string> stuck;
      for (const Stream& s : streams) {
        if (s.sent < total)
          stuck.push_back(absl::StrCat("rank ", s.rank, " at ", s.sent, "/", total));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "broadcast of ", bytes, " bytes did not finish before its deadline; not received by: ",
          absl::StrJoin(stuck, ", ")));
    }
    const absl::Duration wait = std::min(deadline - now, kPollCap);
    ::poll(blocked.data(), blocked.size(),
           static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1)))));
  }
}

void HostRootCommunicator::Abort(absl::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.exchange(true)) return;
  abort_reason_ = std::string(reason);
  // Shutting the sockets down wakes a sender blocked in poll and tells peers the group is gone.
  for (auto& [rank, fd] : peers_) ::shutdown(fd.get(), SHUT_RDWR);
  joined_cv_.notify_all();
}

std::string HostRootCommunicator::Describe() const {
  auto id = HostCollectiveId::Decode(unique_id_);
  std::string text = id.ok() ? absl::StrCat("host collective at ", id->address, ":", id->port)
                             : std::string("host collective");
  if (!note_.empty()) absl::StrAppend(&text, " (", note_, ")");
  return text;
}

absl::StatusOr<std::unique_ptr<HostCollectivePeer>> HostCollectivePeer::Join(
    absl::string_view unique_id, int rank, int world_size, absl::Time deadline) {
  WSYNC_ASSIGN_OR_RETURN(HostCollectiveId id, HostCollectiveId::Decode(unique_id));
  WSYNC_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(id.address, id.port, deadline));
  char hello[kHelloLen];
  std::memcpy(hello, kMagic, kMagicLen);
  std::memcpy(hello + kMagicLen, id.token.data(), kTokenLen);
  PutU32(hello + kMagicLen + kTokenLen, static_cast<uint32_t>(rank));
  PutU32(hello + kMagicLen + kTokenLen + 4, static_cast<uint32_t>(world_size));
  WSYNC_RETURN_IF_ERROR(WriteAll(fd.get(), hello, sizeof(hello), deadline));
  char verdict = 1;
  WSYNC_RETURN_IF_ERROR(ReadExact(fd.get(), &verdict, 1, deadline));
  if (verdict != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("the collective's root refused rank ", rank, " (see the daemon log)"));
  }
  return std::unique_ptr<HostCollectivePeer>(new HostCollectivePeer(std::move(fd), rank));
}

absl::Status HostCollectivePeer::ReadHeader(uint64_t bytes, absl::Time deadline) {
  char header[16];
  WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), header, sizeof(header), deadline));
  const uint64_t seq = GetU64(header);
  const uint64_t len = GetU64(header + 8);
  if (seq != expected_sequence_) {
    return absl::DataLossError(
        absl::StrCat("broadcast sequence ", seq, " where ", expected_sequence_, " was expected"));
  }
  ++expected_sequence_;
  if (len != bytes) {
    // NCCL would hang or corrupt memory on mismatched counts; the stand-in reports it.
    return absl::InvalidArgumentError(absl::StrCat(
        "root broadcast ", len, " bytes but this rank posted a receive of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

void HostCollectivePeer::Shutdown() { ::shutdown(fd_.get(), SHUT_RDWR); }

absl::Status HostCollectivePeer::Receive(void* dst, uint64_t bytes, absl::Time deadline) {
  WSYNC_RETURN_IF_ERROR(ReadHeader(bytes, deadline));
  return ReadExact(fd_.get(), dst, bytes, deadline);
}

absl::Status HostCollectivePeer::ReceiveScattered(const std::vector<iovec>& pieces,
                                                  absl::Time deadline) {
  uint64_t bytes = 0;
  for (const iovec& piece : pieces) bytes += piece.iov_len;
  WSYNC_RETURN_IF_ERROR(ReadHeader(bytes, deadline));
  return ReadExactV(fd_.get(), pieces, deadline);
}

absl::StatusOr<float> HostCollectivePeer::AllReduceSum(float value, absl::Time deadline) {
  WSYNC_RETURN_IF_ERROR(WriteAll(fd_.get(), &value, sizeof(value), deadline));
  float sum = 0;
  WSYNC_RETURN_IF_ERROR(Receive(&sum, sizeof(sum), deadline));
  return sum;
}

absl::Status HostCollectivePeer::ReceivePartial(void* dst, uint64_t bytes, uint64_t partial,
                                                absl::Time deadline) {
  WSYNC_RETURN_IF_ERROR(ReadHeader(bytes, deadline));
  return ReadExact(fd_.get(), dst, std::min(bytes, partial), deadline);
}

}  // namespace wsync
