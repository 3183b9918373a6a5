#include "daemon/relay/relay_channel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/peer_text.h"

namespace wsync {

RelayChannel::RelayChannel(std::string subscriber_id, RelaySubscription subscription, Writer write,
                           std::function<void()> cancel)
    : subscriber_id_(std::move(subscriber_id)),
      subscription_(std::move(subscription)),
      write_(std::move(write)),
      cancel_(std::move(cancel)) {
  writer_ = std::thread([this] { WriteLoop(); });
}

RelayChannel::~RelayChannel() { Shutdown(); }

std::string RelayChannel::Describe() const {
  return absl::StrCat("node ", SanitizePeerText(subscription_.node, kMaxRelayText), " (",
                      subscriber_id_, ")");
}

absl::StatusOr<uint64_t> RelayChannel::Send(v1::RelayRequest request) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  if (queue_.size() >= kMaxQueued) {
    lock.unlock();
    const absl::Status stuck = absl::UnavailableError(
        absl::StrCat(Describe(), " reads nothing: ", kMaxQueued, " requests wait to be written"));
    Close(stuck);
    Cancel();
    return stuck;
  }
  const uint64_t id = next_id_++;
  pending_.emplace(id, Pending{std::nullopt, absl::Now()});
  request.set_id(id);
  v1::RelayDown down;
  *down.mutable_request() = std::move(request);
  queue_.push_back(std::move(down));
  cv_.notify_all();
  return id;
}

void RelayChannel::WriteLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || !closed_.ok(); });
    if (!closed_.ok()) return;
    v1::RelayDown down = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    const bool written = write_(down);
    lock.lock();
    writing_ = false;
    if (!written && closed_.ok()) {
      closed_ = absl::UnavailableError(absl::StrCat("the subscription of ", Describe(), " broke"));
      cv_.notify_all();
    }
  }
}

absl::StatusOr<v1::RelayReply> RelayChannel::Await(uint64_t id, absl::Time deadline,
                                                   absl::Duration silence) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    return absl::InternalError(absl::StrCat("relay request ", id, " was never sent or is taken"));
  }
  const auto ready = [&] { return it->second.reply.has_value() || !closed_.ok(); };
  while (!ready()) {
    const absl::Time quiet_until = it->second.heard + silence;
    const absl::Time wake = std::min(deadline, quiet_until);
    if (cv_.wait_until(lock, absl::ToChronoTime(wake)) == std::cv_status::no_timeout || ready()) {
      continue;
    }
    const absl::Time now = absl::Now();
    if (now < deadline && now < it->second.heard + silence) continue;  // progress came meanwhile
    const bool quiet = now < deadline;
    pending_.erase(it);
    const absl::Status late = absl::DeadlineExceededError(
        quiet ? absl::StrCat(Describe(), " said nothing of relay request ", id, " for ",
                             absl::FormatDuration(silence))
              : absl::StrCat(Describe(), " did not answer relay request ", id, " in time"));
    lock.unlock();
    // Its stream is of no more use: the downstream subscribes again, afresh.
    Close(absl::UnavailableError(late.message()));
    Cancel();
    return late;
  }
  if (!it->second.reply.has_value()) {
    pending_.erase(it);
    return closed_;
  }
  v1::RelayReply reply = std::move(*it->second.reply);
  pending_.erase(it);
  return reply;
}

absl::StatusOr<v1::RelayReply> RelayChannel::Call(v1::RelayRequest request, absl::Time deadline,
                                                  absl::Duration silence) {
  absl::StatusOr<uint64_t> id = Send(std::move(request));
  if (!id.ok()) return id.status();
  return Await(*id, deadline, silence);
}

void RelayChannel::Forget(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(id);
}

absl::Status RelayChannel::Deliver(v1::RelayReply reply) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(reply.id());
  if (it == pending_.end() || it->second.reply.has_value()) {
    // A reply to a request that was given up on here arrives late: not the peer's fault.
    if (reply.id() > 0 && reply.id() < next_id_ && it == pending_.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("a reply to relay request ", reply.id(), ", which was ",
                     it == pending_.end() ? "never sent" : "answered already"));
  }
  it->second.reply = std::move(reply);
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status RelayChannel::Progress(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    // Progress on a request answered or given up on meanwhile: not the peer's fault.
    if (id > 0 && id < next_id_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("progress on relay request ", id, ", which was never sent"));
  }
  it->second.heard = absl::Now();
  cv_.notify_all();
  return absl::OkStatus();
}

void RelayChannel::Close(absl::Status why) {
  if (why.ok()) {
    why = absl::UnavailableError(absl::StrCat("the subscription of ", Describe(), " ended"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return;
  closed_ = std::move(why);
  queue_.clear();
  cv_.notify_all();
}

void RelayChannel::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!shut_ && cancel_) cancel_();
}

void RelayChannel::Shutdown() {
  Close(absl::OkStatus());
  {
    // A write in progress (a downstream that does not read) returns once the stream is
    // cancelled; a stream that simply ended is left to end as it did.
    std::lock_guard<std::mutex> lock(mu_);
    if (writing_ && !shut_ && cancel_) cancel_();
  }
  if (writer_.joinable() && writer_.get_id() != std::this_thread::get_id()) writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  shut_ = true;
}

absl::Status RelayChannel::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

absl::Status ReplyStatus(const v1::RelayReply& reply, const std::string& who) {
  if (reply.code() == 0) return absl::OkStatus();
  const int code = reply.code() > 0 && reply.code() <= 16
                       ? reply.code()
                       : static_cast<int>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat(who, ": ", SanitizePeerText(reply.message(), 4096)));
}

void RelayChannel::MarkPairsLost(std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  pairs_lost_ = why.empty() ? "the downstream lost its pairs" : std::move(why);
}

void RelayChannel::ClearPairsLost() {
  std::lock_guard<std::mutex> lock(mu_);
  pairs_lost_.clear();
}

std::string RelayChannel::pairs_lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pairs_lost_;
}

void RelayChannel::set_resident_version(std::string version) {
  std::lock_guard<std::mutex> lock(mu_);
  resident_version_ = std::move(version);
}

std::string RelayChannel::resident_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resident_version_;
}

}  // namespace wsync
