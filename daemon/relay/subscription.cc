#include "daemon/relay/subscription.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"

namespace wsync {
namespace {

absl::Status CheckTexts(const RelaySubscription& want) {
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the subscriber's node", want.node, kMaxRelayText));
  WSYNC_RETURN_IF_ERROR(CheckRelayNodeName(want.node));
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the subscriber's platform", want.platform, kMaxRelayText));
  if (!want.nccl_version.empty()) {
    WSYNC_RETURN_IF_ERROR(
        CheckPeerLabel("the subscriber's NCCL version", want.nccl_version, kMaxRelayText));
  }
  if (want.groups.empty()) {
    return absl::InvalidArgumentError("a subscription names at least one group");
  }
  if (want.groups.size() > kMaxRelayGroups) {
    return absl::InvalidArgumentError(absl::StrCat("a subscription names at most ", kMaxRelayGroups,
                                                   " groups, not ", want.groups.size()));
  }
  std::set<std::string> seen;
  for (const std::string& group : want.groups) {
    WSYNC_RETURN_IF_ERROR(CheckPeerLabel("a subscribed group's name", group, kMaxNameBytes));
    if (!seen.insert(group).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the subscription names group '", group, "' twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSubscription(const RelaySubscription& want, const RelayUpstream& have) {
  if (want.protocol_version != kRelayProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the subscriber speaks relay protocol ", want.protocol_version, ", this wsyncd speaks ",
        kRelayProtocolVersion, ": run the same wsync release on both nodes"));
  }
  WSYNC_RETURN_IF_ERROR(CheckTexts(want));
  if (want.platform != have.platform) {
    return absl::FailedPreconditionError(
        absl::StrCat("the subscriber runs the ", want.platform, " platform, this wsyncd the ",
                     have.platform, " platform: both ends of a relay move bytes the same way"));
  }
  if (want.nccl_version != have.nccl_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the subscriber's NCCL is ", want.nccl_version.empty() ? "none" : want.nccl_version,
        ", this wsyncd's is ", have.nccl_version.empty() ? "none" : have.nccl_version,
        ": NCCL connects only peers of its own version (give both daemons the same --nccl-lib)"));
  }
  if (!have.token_nodes.empty() && std::find(have.token_nodes.begin(), have.token_nodes.end(),
                                             want.node) == have.token_nodes.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the subscriber's relay token is bound to node(s) ", absl::StrJoin(have.token_nodes, ", "),
        "; it subscribed as node '", SanitizePeerText(want.node, kMaxRelayText), "'"));
  }
  for (const std::string& group : want.groups) {
    if (std::find(have.token_groups.begin(), have.token_groups.end(), group) ==
        have.token_groups.end()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the subscriber's relay token does not name group '", group, "' (it names ",
          have.token_groups.empty() ? "none" : absl::StrJoin(have.token_groups, ", "), ")"));
    }
    WSYNC_RETURN_IF_ERROR(have.check_group(group, want.node));
  }
  const uint64_t close_after = want.bucket_rules.close_after_bytes;
  if (close_after != 0 && close_after < kMinRelayCloseAfterBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the subscriber's local groups close buckets after ", close_after,
        " bytes; the upstream plans every subscriber's buckets alike and takes no rule below ",
        kMinRelayCloseAfterBytes,
        " bytes, which would cut every other subscriber's buckets "
        "as small"));
  }
  if (want.slot_bytes < have.slot_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the subscriber's slots hold ", want.slot_bytes, " bytes, this wsyncd's ", have.slot_bytes,
        ": a bucket fills up to one upstream slot and must land in one downstream slot (give the "
        "downstream --slot-bytes of at least ",
        have.slot_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRelayNodeName(const std::string& node) {
  const bool allowed =
      !node.empty() && node.size() <= 253 && std::all_of(node.begin(), node.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
      });
  if (allowed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("node name '", SanitizePeerText(node, kQuotedNameBytes),
                   "' is not 1 to 253 characters of letters, digits, '.', '_' and '-'"));
}

absl::StatusOr<std::string> RelayMemberNode(const std::string& url) {
  constexpr absl::string_view kScheme = "wsyncd://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay member '", SanitizePeerText(url, kQuotedNameBytes),
                     "' is not wsyncd://<node>: a relay group's members are downstream daemons"));
  }
  std::string node = url.substr(kScheme.size());
  if (absl::Status s = CheckRelayNodeName(node); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("relay member ", url, ": ", s.message()));
  }
  return node;
}

}  // namespace wsync
