#ifndef WSYNC_DAEMON_SERVICE_LEGACY_ENGINE_OPTIONS_H_
#define WSYNC_DAEMON_SERVICE_LEGACY_ENGINE_OPTIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "wsync/v1/admin.pb.h"

namespace wsync {

// The admin API's deprecated forms of a group's engine kind, options and transport: the EngineKind
// enum, the typed per-kind messages and the Transport enum, superseded by GroupSpec.kind_name,
// engine_options_json and transport_name. Older
// clients keep working through these mappings, each use logged as deprecated, until a later
// release removes them.

// The kind's name for the enum; INVALID_ARGUMENT for an unknown or unset value.
absl::StatusOr<std::string> LegacyKindName(v1::EngineKind kind);
// The enum for a kind's name; ENGINE_KIND_UNSPECIFIED for a kind the enum does not name.
v1::EngineKind LegacyKindOf(absl::string_view name);
// The transport's name for the enum (TRANSPORT_UNSPECIFIED is the broadcast, as the proto says);
// INVALID_ARGUMENT for an unknown value.
absl::StatusOr<std::string> LegacyTransportName(v1::Transport transport);
// The enum for a transport's name; TRANSPORT_UNSPECIFIED for one the enum does not name.
v1::Transport LegacyTransportOf(absl::string_view name);
// The typed options set in `proto` as the kind's JSON options object; `options_kind` is the kind
// whose message was set.
absl::StatusOr<nlohmann::json> LegacyOptionsJson(const v1::GroupSpec& proto,
                                                 std::string* options_kind);
// Fills the typed message of `kind` from its JSON options (those of the three kinds the messages
// exist for), for clients that read only the typed form.
void SetLegacyOptions(absl::string_view kind, const nlohmann::json& options, v1::GroupSpec* out);

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_LEGACY_ENGINE_OPTIONS_H_
