#ifndef WSYNC_DAEMON_RELAY_SUBSCRIPTION_H_
#define WSYNC_DAEMON_RELAY_SUBSCRIPTION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/bucket_planner.h"

namespace wsync {

// The relay protocol spoken between daemons (docs/RELAY.md). An upstream admits only its own:
// the frames change with it.
inline constexpr uint32_t kRelayProtocolVersion = 1;

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
  // The groups the caller's relay token names.
  std::vector<std::string> token_groups;
  // Whether the upstream has a group of that name.
  std::function<bool(const std::string&)> has_group;
  // The upstream's slots: every bucket of its groups fits one, so a downstream's must hold it.
  uint64_t slot_bytes = 0;
};

// The most groups one subscription names, and the longest name, node or version text read.
inline constexpr size_t kMaxRelayGroups = 64;
inline constexpr size_t kMaxRelayText = 256;

// OK when `want` may be admitted; else an error naming both sides of what differs: protocol
// (FAILED_PRECONDITION), platform or NCCL version (FAILED_PRECONDITION), a group the token does
// not name (PERMISSION_DENIED), a group the upstream does not have (NOT_FOUND), slots smaller
// than the upstream's (FAILED_PRECONDITION), or a malformed request (INVALID_ARGUMENT: no
// group, a group twice, texts over kMaxRelayText, more than kMaxRelayGroups groups). Texts in
// errors are sanitized (they come from the peer).
absl::Status CheckSubscription(const RelaySubscription& want, const RelayUpstream& have);

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_SUBSCRIPTION_H_
