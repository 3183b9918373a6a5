#ifndef WSYNC_DAEMON_SERVICE_GROUP_SPEC_PROTO_H_
#define WSYNC_DAEMON_SERVICE_GROUP_SPEC_PROTO_H_

#include "absl/status/statusor.h"
#include "daemon/core/group_spec.h"
#include "daemon/core/weight_group.h"
#include "wsync/v1/admin.pb.h"

namespace wsync {

// The admin API's group spec as the core's GroupSpec, defaults filled in; the engine's options
// must match its kind. Validation is the core's (ValidateGroupSpec), not repeated here.
absl::StatusOr<GroupSpec> GroupSpecFromProto(const v1::GroupSpec& proto);
void GroupSpecToProto(const GroupSpec& spec, v1::GroupSpec* out);
void GroupToProto(const GroupSnapshot& group, v1::GroupInfo* out);

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_GROUP_SPEC_PROTO_H_
