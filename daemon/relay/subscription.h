#ifndef WSYNC_DAEMON_RELAY_SUBSCRIPTION_H_
#define WSYNC_DAEMON_RELAY_SUBSCRIPTION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/bucket_planner.h"

namespace wsync {

// The relay protocol spoken between daemons (docs/RELAY.md). An upstream admits only its own:
// the frames change with it.
// 2: streams (RelayJoin.stream); 3: progress while a commit runs (RelayProgress).
inline constexpr uint32_t kRelayProtocolVersion = 3;

// What a downstream wsyncd asks for when it subscribes.
struct RelaySubscription {
  uint32_t protocol_version = 0;
  std::string platform;      // "cuda" or "host"
  std::string nccl_version;  // "2.28.9"; empty on "host"
  std::string node;          // who subscribes, for logs and listings
  std::vector<std::string> groups;
  uint64_t slot_bytes = 0;
  BucketRules bucket_rules;
};

// What the upstream is and may give this caller.
struct RelayUpstream {
  std::string platform;
  std::string nccl_version;
  // The groups the caller's relay token names, and the nodes it is bound to (empty: any).
  std::vector<std::string> token_groups;
  std::vector<std::string> token_nodes;
  // OK when the upstream has a relay group of that name with the node as a member: NOT_FOUND
  // without such a group, FAILED_PRECONDITION for a group that is no relay group, PERMISSION_DENIED
  // when the node is not one of its members; each naming what it found.
  std::function<absl::Status(const std::string& group, const std::string& node)> check_group;
  // The upstream's slots: every bucket of its groups fits one, so a downstream's must hold it.
  uint64_t slot_bytes = 0;
};

// The most groups one subscription names, and the longest name, node or version text read.
inline constexpr size_t kMaxRelayGroups = 64;
inline constexpr size_t kMaxRelayText = 256;
// The smallest close-after rule a subscriber may bring: the upstream plans one set of buckets for
// every subscriber, so one subscriber's rule cuts every other's buckets.
inline constexpr uint64_t kMinRelayCloseAfterBytes = uint64_t{1} << 20;

// OK when `want` may be admitted; else an error naming both sides of what differs: protocol
// (FAILED_PRECONDITION), platform or NCCL version (FAILED_PRECONDITION), a group the token does
// not name or a node it is not bound to (PERMISSION_DENIED), a group check_group refuses, slots
// smaller than the upstream's or a close-after rule below kMinRelayCloseAfterBytes
// (FAILED_PRECONDITION), a node that is no node name, or a malformed request (INVALID_ARGUMENT: no
// group, a group twice, texts over kMaxRelayText, more than kMaxRelayGroups groups). Texts in
// errors are sanitized (they come from the peer).
absl::Status CheckSubscription(const RelaySubscription& want, const RelayUpstream& have);

// The node a relay group's member URL names: "rollout-1" of "wsyncd://rollout-1";
// INVALID_ARGUMENT for anything else (another scheme, a path, a node that is no node name).
absl::StatusOr<std::string> RelayMemberNode(const std::string& url);
// OK for a node name: 1 to 253 characters of [A-Za-z0-9._-] (a host name, or what an operator
// calls the node); INVALID_ARGUMENT otherwise, saying what is allowed.
absl::Status CheckRelayNodeName(const std::string& node);

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_SUBSCRIPTION_H_
