#ifndef WSYNC_DAEMON_CORE_ENGINE_GROUP_NAME_H_
#define WSYNC_DAEMON_CORE_ENGINE_GROUP_NAME_H_

// The name the engines know a weight-update group by, and how it is shown.
//
// Engines that rendezvous through torch's helper (SGLang, LMDeploy) name every store key of the
// group after it ("/G/G//cuda//0"), and the group's store admits a connection as an engine rank
// only once it names such a key. So the name carries a secret token, and only the processes
// wsyncd tells it (the engines, in their init request) can take a rank's place: logs, errors
// returned to callers and wsyncctl show the name with its token replaced.

#include <string>

#include "absl/strings/string_view.h"

namespace wsync {

// What stands in for a token wherever a name is shown.
inline constexpr char kHiddenToken[] = "<secret>";
// A token's length: 32 lowercase hex digits.
inline constexpr size_t kEngineGroupTokenChars = 32;

// "<name>.<incarnation>.<token>", the token 128 random bits drawn at each call (one call per
// group made: each group, and each wsyncd start, has its own). An empty incarnation keeps the
// bare name, with no token (for tests).
std::string EngineGroupName(const std::string& name, const std::string& incarnation);

// The token of a name EngineGroupName made; "" for one without.
absl::string_view EngineGroupToken(absl::string_view engine_group);

// `text` with every token of a name EngineGroupName made (by any wsyncd) hidden: a '.' and 32
// lowercase hex digits not followed by another letter or digit. Engines' answers may quote
// names (SGLang lists every group it holds when asked for another), store keys hold them twice.
std::string RedactEngineGroupTokens(absl::string_view text);

// `engine_group` with its token hidden: "<name>.<incarnation>.<secret>".
inline std::string ShownEngineGroup(absl::string_view engine_group) {
  return RedactEngineGroupTokens(engine_group);
}

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_ENGINE_GROUP_NAME_H_
