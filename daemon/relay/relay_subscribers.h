#ifndef WSYNC_DAEMON_RELAY_RELAY_SUBSCRIBERS_H_
#define WSYNC_DAEMON_RELAY_RELAY_SUBSCRIBERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/relay/relay_channel.h"
#include "daemon/relay/subscription.h"

namespace wsync {

// The downstream daemons subscribed to this wsyncd's groups now (the node relay's upstream):
// each admitted subscription from its admission until its stream ends. Thread-safe.
class RelaySubscribers {
 public:
  struct Subscriber {
    std::string id;  // "s1", "s2", ... in admission order
    RelaySubscription subscription;
    std::string caller;  // who holds the stream, as the gRPC front describes it
    absl::Time since;
    // Its stream, once the service attached it; null before.
    std::shared_ptr<RelayChannel> channel;
  };

  // Admits a subscription that CheckSubscription allowed; returns its id. ALREADY_EXISTS when
  // the same node already holds a subscription to one of its groups (a downstream that
  // reconnects is admitted once its old stream has ended): each subscription holds a server
  // thread, and one node is fed each group once.
  absl::StatusOr<std::string> Add(RelaySubscription subscription, std::string caller);
  // The stream subscription `id` is served on.
  void Attach(const std::string& id, std::shared_ptr<RelayChannel> channel);
  // The stream of `node`'s subscription to `group`; null where it holds none.
  std::shared_ptr<RelayChannel> Channel(const std::string& group, const std::string& node) const;
  // Ends one (its stream ended); a second call does nothing.
  void Remove(const std::string& id);
  std::vector<Subscriber> List() const;
  // The subscribers of `group`, in admission order.
  std::vector<Subscriber> OfGroup(const std::string& group) const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, Subscriber> subscribers_;  // by admission number
};

// The subscribers of this process's wsyncd (one per process), for the relay groups' members,
// which look their downstream up by node when they probe. Set by the gRPC server while it runs;
// null before and after. Shared: a member that looked them up keeps them while it uses them, even
// if the server stops meanwhile.
void SetProcessRelaySubscribers(std::shared_ptr<RelaySubscribers> subscribers);
std::shared_ptr<RelaySubscribers> ProcessRelaySubscribers();

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RELAY_SUBSCRIBERS_H_
