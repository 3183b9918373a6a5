#ifndef WSYNC_DAEMON_SERVICE_RELAY_SERVICE_H_
#define WSYNC_DAEMON_SERVICE_RELAY_SERVICE_H_

#include "daemon/core/daemon_core.h"
#include "daemon/relay/relay_subscribers.h"
#include "daemon/relay/subscription.h"
#include "daemon/service/authorizer.h"
#include "daemon/service/stream_gate.h"
#include "wsync/v1/relay.grpc.pb.h"

namespace wsync {

// The node relay's subscriptions (docs/RELAY.md): converts the wire to RelaySubscription, asks
// CheckSubscription with what this wsyncd is and the caller's token may have, and keeps an
// admitted subscription in `subscribers` for as long as its stream lasts.
class RelayService final : public v1::Relay::Service {
 public:
  RelayService(DaemonCore* core, const Authorizer* auth, StreamGate* streams,
               RelaySubscribers* subscribers)
      : core_(core), auth_(auth), streams_(streams), subscribers_(subscribers) {}

  grpc::Status Subscribe(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<v1::RelayDown, v1::RelayUp>* stream) override;

 private:
  DaemonCore* core_;
  const Authorizer* auth_;
  StreamGate* streams_;
  RelaySubscribers* subscribers_;
};

// The wire's subscription as the relay module reads it (texts as sent: CheckSubscription bounds
// them).
RelaySubscription SubscriptionFromProto(const v1::RelaySubscribe& wire);

// OK when `core` has a relay group `group` with `node` as a member (RelayUpstream::check_group).
absl::Status CheckRelayMember(const DaemonCore& core, const std::string& group,
                              const std::string& node);

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_RELAY_SERVICE_H_
