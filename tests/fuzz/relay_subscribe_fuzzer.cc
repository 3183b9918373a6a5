// Fuzzes what a downstream wsyncd's subscription carries to an upstream (the node relay): the
// wire message (v1::RelayUp, parsed as gRPC parses it), its conversion (SubscriptionFromProto)
// and the admission check (CheckSubscription) against an upstream whose token names "policy"
// and "ref" and which has "policy", "ref" and "critic".
//
// Input: the serialized RelayUp.
//
// Invariants: nothing crashes or is undefined (the sanitizers watch); an admitted subscription
// speaks this protocol and platform, names 1..kMaxRelayGroups distinct groups, each named by the
// token and present here, with slots at least the upstream's and a printable node of at most
// kMaxRelayText bytes; every refusal's message is valid UTF-8 without control characters, since
// it reaches the upstream's log and the subscriber.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "daemon/core/peer_text.h"
#include "daemon/relay/subscription.h"
#include "daemon/service/relay_service.h"
#include "tests/fuzz/fuzz_check.h"
#include "wsync/v1/relay.pb.h"

namespace wsync {
namespace {

bool Printable(const std::string& text) { return SanitizePeerText(text, text.size() + 1) == text; }

}  // namespace
}  // namespace wsync

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wsync;  // NOLINT(build/namespaces): a fuzz entry point
  v1::RelayUp up;
  if (!up.ParseFromArray(data, static_cast<int>(size)) || !up.has_subscribe()) return 0;
  const RelaySubscription want = SubscriptionFromProto(up.subscribe());
  RelayUpstream have;
  have.platform = "host";
  have.nccl_version = "";
  have.token_groups = {"policy", "ref"};
  have.check_group = [](const std::string& g, const std::string&) {
    return g == "policy" || g == "ref" || g == "critic" ? absl::OkStatus()
                                                        : absl::NotFoundError("no such group");
  };
  have.slot_bytes = 1 << 20;
  const absl::Status s = CheckSubscription(want, have);
  if (!s.ok()) {
    FUZZ_CHECK(Printable(std::string(s.message())), std::string(s.message()));
    return 0;
  }
  FUZZ_CHECK(want.protocol_version == kRelayProtocolVersion, "protocol");
  FUZZ_CHECK(want.platform == have.platform && want.nccl_version.empty(), want.platform);
  FUZZ_CHECK(!want.groups.empty() && want.groups.size() <= kMaxRelayGroups, "group count");
  std::set<std::string> seen;
  for (const std::string& g : want.groups) {
    FUZZ_CHECK(seen.insert(g).second, "a group twice: " + g);
    FUZZ_CHECK(g == "policy" || g == "ref", "a group the token does not name: " + g);
  }
  FUZZ_CHECK(want.slot_bytes >= have.slot_bytes, "slots too small");
  FUZZ_CHECK(!want.node.empty() && want.node.size() <= kMaxRelayText && Printable(want.node),
             "node");
  return 0;
}
