#ifndef WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_BINDING_H_
#define WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_BINDING_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/relay/relay_channel.h"

namespace wsync {

// The relay transport's one data path (docs/RELAY.md): a bucket's bytes cross to a downstream
// wsyncd on a 2-rank collective between the daemons, announced on the downstream's subscription
// stream. This header is the whole contract between the relay transport and the members it
// drives (the `wsyncd` engine kind).
inline constexpr absl::string_view kRelayDataPath = "relay";

class RelayBinding : public DataPathBinding {
 public:
  absl::string_view data_path() const final { return kRelayDataPath; }
  // The member's subscription stream now: FAILED_PRECONDITION naming the node and group while it
  // holds none (it has not subscribed, or its stream ended).
  virtual absl::StatusOr<std::shared_ptr<RelayChannel>> Channel() const = 0;
  // Whether the member's buckets may cross as deltas (the group's `delta` option).
  virtual bool deltas() const = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_BINDING_H_
