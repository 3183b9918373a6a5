#include "daemon/engines/wsyncd/wsyncd_adapter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "daemon/core/peer_text.h"
#include "daemon/relay/relay_subscribers.h"
#include "daemon/relay/subscription.h"

namespace wsync {

class WsyncdAdapter::MemberBinding final : public RelayBinding {
 public:
  explicit MemberBinding(const WsyncdAdapter* adapter) : adapter_(adapter) {}
  absl::StatusOr<std::shared_ptr<RelayChannel>> Channel() const override {
    return adapter_->Channel();
  }
  bool deltas() const override { return adapter_->options_.deltas(); }

 private:
  const WsyncdAdapter* adapter_;
};

WsyncdAdapter::WsyncdAdapter(const EngineEndpoint& endpoint, const AdapterTimeouts& timeouts,
                             const WsyncdOptions& options, std::string group)
    : endpoint_(endpoint),
      timeouts_(timeouts),
      options_(options),
      group_(std::move(group)),
      // The URL was read by the transport's CheckEngineUrl before any adapter was made.
      node_(RelayMemberNode(endpoint.url).value_or(endpoint.url)),
      binding_(std::make_unique<MemberBinding>(this)) {}

WsyncdAdapter::~WsyncdAdapter() = default;

absl::StatusOr<std::shared_ptr<RelayChannel>> WsyncdAdapter::Channel() const {
  std::shared_ptr<RelaySubscribers> subscribers = ProcessRelaySubscribers();
  std::shared_ptr<RelayChannel> channel =
      subscribers != nullptr ? subscribers->Channel(group_, node_) : nullptr;
  if (channel == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("downstream node ", node_, " has not subscribed to group '", group_,
                     "' (its wsyncd subscribes with a relay feed naming this wsyncd and group)"));
  }
  if (absl::Status open = channel->open(); !open.ok()) return open;
  return channel;
}

AdapterCapabilities WsyncdAdapter::Capabilities() const {
  AdapterCapabilities c;
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  if (channel.ok()) c.bucket_rules = (*channel)->subscription().bucket_rules;
  return c;
}

absl::Status WsyncdAdapter::Probe() { return Channel().status(); }

EngineHealth WsyncdAdapter::Health() {
  EngineHealth h;
  h.variant = "relay";
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  if (!channel.ok()) {
    h.error = std::string(channel.status().message());
    return h;
  }
  h.healthy = true;
  h.engine_version = probed_version();
  return h;
}

std::string WsyncdAdapter::probed_version() const {
  return absl::StrCat("wsyncd relay protocol ", kRelayProtocolVersion);
}

absl::Status WsyncdAdapter::ValidateBucket(const BucketManifest& manifest) const {
  // A member whose subscription ended is the transport's to report (dropped, or the bucket
  // fails): the bucket itself is still good for the others.
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  if (!channel.ok()) return absl::OkStatus();
  const uint64_t slot = (*channel)->subscription().slot_bytes;
  if (manifest.span_bytes() > slot) {
    return absl::InvalidArgumentError(absl::StrCat("the bucket spans ", manifest.span_bytes(),
                                                   " bytes; node ", node_, "'s slots hold ", slot));
  }
  return absl::OkStatus();
}

absl::Status WsyncdAdapter::BeginUpdate(const UpdateInfo& update) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_warnings_.clear();
    committed_ = false;
  }
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  if (!channel.ok()) return channel.status();
  // Until this begin is answered, nothing is known of what the member holds: no deltas.
  (*channel)->set_resident_version("");
  v1::RelayRequest request;
  request.mutable_begin()->set_update_id(update.update_id);
  request.mutable_begin()->set_version(update.version);
  absl::StatusOr<v1::RelayReply> reply =
      (*channel)->Call(std::move(request), absl::Now() + timeouts_.control);
  if (!reply.ok()) return reply.status();
  absl::Status begun =
      ReplyStatus(*reply, absl::StrCat("node ", node_, " could not begin the update"));
  if (reply->pairs_lost()) (*channel)->MarkPairsLost(std::string(begun.message()));
  // What deltas of this update may be sent against (the relay transport reads it per bucket).
  (*channel)->set_resident_version(
      begun.ok() ? SanitizePeerText(reply->resident_version(), kMaxRelayText) : "");
  std::lock_guard<std::mutex> lock(mu_);
  update_open_ = begun.ok();
  return begun;
}

absl::Status WsyncdAdapter::AbortOpenUpdate(absl::string_view why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!update_open_) return absl::OkStatus();
    update_open_ = false;
  }
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  // A downstream whose subscription ended aborted its update when it ended.
  if (!channel.ok()) return absl::OkStatus();
  v1::RelayRequest request;
  request.mutable_abort()->set_reason(std::string(why));
  absl::StatusOr<v1::RelayReply> reply =
      (*channel)->Call(std::move(request), absl::Now() + timeouts_.control);
  if (!reply.ok()) return reply.status();
  return ReplyStatus(*reply, absl::StrCat("node ", node_, " could not abort its update"));
}

void WsyncdAdapter::AbandonUpdate() {
  bool committed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    committed = std::exchange(committed_, false);
  }
  if (!committed) {
    // Best effort: a downstream that does not hear it aborts when its bucket deadline passes.
    (void)AbortOpenUpdate("the upstream's update ended without a commit");
    return;
  }
  // It committed a version the group did not take: its engines must not serve it.
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  if (!channel.ok()) {
    WSYNC_LOG(Warning, "relay: node ", node_,
              " committed a version the group did not take and "
              "cannot be told to hold it: ",
              channel.status().message());
    return;
  }
  v1::RelayRequest request;
  request.mutable_hold()->set_reason(
      "the upstream's update did not land on enough nodes; this node's commit stands alone");
  absl::StatusOr<v1::RelayReply> reply =
      (*channel)->Call(std::move(request), absl::Now() + timeouts_.control);
  absl::Status held =
      reply.ok() ? ReplyStatus(*reply, absl::StrCat("node ", node_, " could not hold its engines"))
                 : reply.status();
  if (!held.ok()) WSYNC_LOG(Warning, "relay: ", held.message());
}

absl::Status WsyncdAdapter::FinishUpdate(const UpdateInfo& update) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    update_open_ = false;  // the downstream's update ends with its commit, whatever its outcome
  }
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = Channel();
  if (!channel.ok()) return channel.status();
  // The downstream's commit may take long (its engines load what its slots still hold), but a
  // member that stopped (killed without a word, stalled, cut off) says nothing: it is dropped a
  // bucket deadline after its last progress, so the others commit on the quorum.
  v1::RelayRequest request;
  request.mutable_commit()->set_progress_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(
          std::clamp(timeouts_.bucket / 4, absl::Milliseconds(10), absl::Seconds(5)))));
  absl::StatusOr<v1::RelayReply> reply = (*channel)->Call(
      std::move(request), absl::Now() + options_.commit_timeout(), timeouts_.bucket);
  if (!reply.ok()) {
    // Sent, with no answer: the downstream may have committed, so a failed group commit holds it.
    std::lock_guard<std::mutex> lock(mu_);
    committed_ = true;
    return reply.status();
  }
  // Every engine of the downstream, by node, in the upstream's result; the texts are the
  // peer's, bounded and sanitized.
  std::vector<std::string> engines;
  for (int i = 0; i < reply->engines_size() && i < kMaxRelayedOutcomes; ++i) {
    const v1::EngineResult& e = reply->engines(i);
    engines.push_back(absl::StrCat(
        node_, " engine ", SanitizePeerText(e.engine(), kQuotedNameBytes), ": ",
        e.ok() ? "committed" : absl::StrCat("failed: ", SanitizePeerText(e.message(), 1024))));
  }
  if (reply->engines_size() > kMaxRelayedOutcomes) {
    engines.push_back(absl::StrCat("... and ", reply->engines_size() - kMaxRelayedOutcomes,
                                   " more engine(s) of ", node_));
  }
  absl::Status status = ReplyStatus(*reply, absl::StrCat("node ", node_, " did not commit"));
  std::lock_guard<std::mutex> lock(mu_);
  relayed_ = std::move(engines);
  committed_ = status.ok();
  return status;
}

std::vector<std::string> WsyncdAdapter::TakeCommitWarnings() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(commit_warnings_, {});
}

std::vector<std::string> WsyncdAdapter::TakeRelayedOutcomes() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(relayed_, {});
}

DataPathBinding* WsyncdAdapter::Binding(absl::string_view data_path) {
  return data_path == kRelayDataPath ? binding_.get() : nullptr;
}

}  // namespace wsync
