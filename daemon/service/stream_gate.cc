#include "daemon/service/stream_gate.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace wsync {
namespace {

// How often the deadline thread looks: the deadlines are seconds, this is their precision.
constexpr absl::Duration kReapPeriod = absl::Milliseconds(100);

bool Counted(const Caller& caller) { return caller.connection != kInProcessConnection; }

}  // namespace

StreamGate::Ticket& StreamGate::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Reset();
    gate_ = other.gate_;
    id_ = other.id_;
    other.gate_ = nullptr;
  }
  return *this;
}

void StreamGate::Ticket::Progress() {
  if (gate_ != nullptr) gate_->Progress(id_);
}

void StreamGate::Ticket::Reset() {
  if (gate_ != nullptr) gate_->Release(id_);
  gate_ = nullptr;
}

StreamGate::StreamGate(StreamLimits limits) : limits_(limits) {
  reaper_ = std::thread([this] { ReapLoop(); });
}

StreamGate::~StreamGate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reaper_.join();
}

int StreamGate::open_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(entries_.size());
}

void StreamGate::NoteRefusalLocked(const std::string& why) {
  ++refused_since_log_;
  if (absl::Now() - last_refusal_log_ < absl::Seconds(5)) return;
  WSYNC_LOG(Warning, "refused ", refused_since_log_, " stream(s) over a limit, the last: ", why);
  refused_since_log_ = 0;
  last_refusal_log_ = absl::Now();
}

absl::StatusOr<StreamGate::Ticket> StreamGate::Admit(const Caller& caller, const std::string& call,
                                                     grpc_call* call_handle, StreamRule rule) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Counted(caller)) {
    std::string refusal;
    if (per_connection_[caller.connection] >= limits_.per_connection) {
      refusal = absl::StrCat(call, " refused: this connection of ", caller.description, " holds ",
                             limits_.per_connection, " streams already, the most one connection ",
                             "may hold (wsyncd --max-streams-per-connection)");
    } else if (per_caller_[caller.identity] >= limits_.per_caller) {
      refusal = absl::StrCat(call, " refused: ", caller.identity, " holds ", limits_.per_caller,
                             " streams already over its connections, the most one caller may ",
                             "hold (wsyncd --max-streams-per-caller)");
    } else if (counted_ >= limits_.total) {
      refusal = absl::StrCat(call, " refused: wsyncd holds ", limits_.total,
                             " streams already, the most it takes from all callers together (",
                             "each holds a server thread; the rest serve other calls)");
    }
    if (!refusal.empty()) {
      // Entries of zero are dropped, so a map holds only connections and callers with streams.
      if (per_connection_[caller.connection] == 0) per_connection_.erase(caller.connection);
      if (per_caller_[caller.identity] == 0) per_caller_.erase(caller.identity);
      NoteRefusalLocked(refusal);
      return absl::ResourceExhaustedError(refusal);
    }
    ++per_connection_[caller.connection];
    ++per_caller_[caller.identity];
    ++counted_;
  }
  Entry entry;
  entry.connection = Counted(caller) ? caller.connection : "";
  entry.identity = caller.identity;
  entry.call = call;
  entry.handle = call_handle;
  if (rule.progress != StreamProgress::kNone) entry.due = absl::Now() + limits_.idle_timeout;
  entry.rule = std::move(rule);
  const uint64_t id = next_id_++;
  entries_.emplace(id, std::move(entry));
  return Ticket(this, id);
}

void StreamGate::Release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const Entry& e = it->second;
  if (!e.connection.empty()) {
    if (--per_connection_[e.connection] <= 0) per_connection_.erase(e.connection);
    if (--per_caller_[e.identity] <= 0) per_caller_.erase(e.identity);
    --counted_;
  }
  entries_.erase(it);
}

void StreamGate::Progress(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  switch (e.rule.progress) {
    case StreamProgress::kNone:
      break;
    case StreamProgress::kFirstMessage:
      e.due = absl::InfiniteFuture();
      break;
    case StreamProgress::kEveryMessage:
      e.due = absl::Now() + limits_.idle_timeout;
      break;
  }
}

void StreamGate::ReapLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(kReapPeriod), [this] { return stop_; });
    const absl::Time now = absl::Now();
    for (auto& [id, e] : entries_) {
      if (e.cancelled || e.due > now) continue;
      e.cancelled = true;
      const std::string why = absl::StrCat(
          e.call, ": no ", e.rule.awaited,
          e.rule.progress == StreamProgress::kFirstMessage ? " within " : " for ",
          absl::FormatDuration(limits_.idle_timeout),
          e.rule.progress == StreamProgress::kFirstMessage ? " of opening the stream" : "",
          " (wsyncd --stream-idle-timeout); the stream is closed");
      WSYNC_LOG(Info, why, " (", e.identity, ")");
      // Cancelled under the lock: the ticket, and with it the call, lives until Release takes
      // the lock. Cancelling only queues the call's completions; it calls nothing of ours.
      grpc_call_cancel_with_status(e.handle, GRPC_STATUS_DEADLINE_EXCEEDED, why.c_str(), nullptr);
    }
  }
}

}  // namespace wsync
