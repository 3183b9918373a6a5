#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_PEERS_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_PEERS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace wsync {

// Who a group's rendezvous store serves (it holds the group's NCCL id), worked out from the
// engines' URLs when the group is made. Addresses are in IpAddress::ToString form.
struct StorePeers {
  // Every address the engines' URLs resolve to. An engine on this node reaches the store from a
  // local address (the advertise address, or loopback), so when any engine resolves to a local
  // address those are let in too.
  std::set<std::string> allowed;
  // This host's interface addresses, loopback included.
  std::set<std::string> local_ips;
  // The URLs of the engines that resolve to a local address.
  std::vector<std::string> local_engines;
};
absl::StatusOr<StorePeers> StorePeersFor(const std::vector<std::string>& engine_urls,
                                         const std::string& advertise_address);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_PEERS_H_
