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
      cancel_(std::move(cancel)) {}

std::string RelayChannel::Describe() const {
  return absl::StrCat("node ", SanitizePeerText(subscription_.node, kMaxRelayText), " (",
                      subscriber_id_, ")");
}

absl::StatusOr<uint64_t> RelayChannel::Send(v1::RelayRequest request) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.ok()) return closed_;
    id = next_id_++;
    pending_.emplace(id, std::nullopt);
  }
  request.set_id(id);
  v1::RelayDown down;
  *down.mutable_request() = std::move(request);
  bool written = false;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    if (writable_) written = write_(down);
  }
  if (!written) {
    Close(absl::UnavailableError(absl::StrCat("the subscription of ", Describe(), " broke")));
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(id);
    return closed_;
  }
  return id;
}

absl::StatusOr<v1::RelayReply> RelayChannel::Await(uint64_t id, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    return absl::InternalError(absl::StrCat("relay request ", id, " was never sent or is taken"));
  }
  const auto ready = [&] { return it->second.has_value() || !closed_.ok(); };
  while (!ready()) {
    if (cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout && !ready()) {
      pending_.erase(it);
      return absl::DeadlineExceededError(
          absl::StrCat(Describe(), " did not answer relay request ", id, " in time"));
    }
  }
  if (!it->second.has_value()) {
    pending_.erase(it);
    return closed_;
  }
  v1::RelayReply reply = std::move(*it->second);
  pending_.erase(it);
  return reply;
}

absl::StatusOr<v1::RelayReply> RelayChannel::Call(v1::RelayRequest request, absl::Time deadline) {
  absl::StatusOr<uint64_t> id = Send(std::move(request));
  if (!id.ok()) return id.status();
  return Await(*id, deadline);
}

absl::Status RelayChannel::Deliver(v1::RelayReply reply) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(reply.id());
  if (it == pending_.end() || it->second.has_value()) {
    // A reply to a request that timed out here arrives late: that is not the peer's fault.
    if (reply.id() > 0 && reply.id() < next_id_ && it == pending_.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("a reply to relay request ", reply.id(), ", which was ",
                     it == pending_.end() ? "never sent" : "answered already"));
  }
  it->second = std::move(reply);
  cv_.notify_all();
  return absl::OkStatus();
}

void RelayChannel::Close(absl::Status why) {
  if (why.ok()) {
    why = absl::UnavailableError(absl::StrCat("the subscription of ", Describe(), " ended"));
  }
  {
    // The stream is gone once its reader returns: no write may start after this.
    std::lock_guard<std::mutex> lock(write_mu_);
    writable_ = false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return;
  closed_ = std::move(why);
  cv_.notify_all();
}

void RelayChannel::Cancel() {
  if (cancel_) cancel_();
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

}  // namespace wsync
