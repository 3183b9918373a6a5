#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_PEERS_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_PEERS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace wsync {

// The peer addresses a group's rendezvous store lets in: every address the engines' URLs resolve
// to when the group is made. An engine on this node reaches the store from a local address (the
// advertise address, or loopback), so when any engine resolves to a local address those are let
// in too. Addresses are in IpAddress::ToString form. The store serves nobody else: it holds the
// group's NCCL id.
absl::StatusOr<std::set<std::string>> StorePeersFor(const std::vector<std::string>& engine_urls,
                                                    const std::string& advertise_address);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_STORE_PEERS_H_
