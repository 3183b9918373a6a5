#ifndef WSYNC_DAEMON_SERVICE_GROUP_SPEC_JSON_H_
#define WSYNC_DAEMON_SERVICE_GROUP_SPEC_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/group_spec.h"
#include "nlohmann/json.hpp"

namespace wsync {

// A group as JSON, the one form both wsyncd's config file ("groups" entries) and a trainer's
// DeclareGroup take: {"name", "kind" (default sglang), "transport" (default broadcast), "device",
// "engines": [{"url", "ranks", "gpus"}], "nccl_lib", "check_weights", "quorum", and the engine's
// own options under its kind's name, e.g. "sglang": {"load_format": "per_tensor"}; SGLang's
// load_format is also read at the top level, where older config files have it}. Unknown keys are
// refused, and every error names where, from `path` ("groups[0].engines[1].rank: unknown key;
// did you mean \"ranks\"?"). The engine and transport kinds must be registered. Maps to the same
// GroupSpec as the admin API; ValidateGroupSpec checks it when the group is declared.
absl::StatusOr<GroupSpec> GroupSpecFromJson(const nlohmann::json& group,
                                            const std::string& path = "group");
// The JSON GroupSpecFromJson reads back as `spec`.
nlohmann::json GroupSpecToJson(const GroupSpec& spec);

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_GROUP_SPEC_JSON_H_
