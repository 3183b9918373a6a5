#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_VERSION_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_VERSION_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/engines/bucket_format.h"
#include "daemon/engines/engine_version.h"

namespace wsync {

// SGLang's version as GET /get_server_info reports it ("version"), read by the rules every engine's
// version follows (engine_version.h).
using SglangVersion = EngineVersion;
inline constexpr size_t kMaxSglangVersionChars = kMaxEngineVersionChars;
inline absl::StatusOr<SglangVersion> ParseSglangVersion(absl::string_view text) {
  return ParseEngineVersion(text);
}

// The colocated payload a server gets (docs/engines/sglang.md has the evidence for each bound):
//
// | SGLang          | load_format per_tensor (null) | load_format flattened_bucket           |
// |-----------------|-------------------------------|----------------------------------------|
// | < 0.5.1         | refused                       | refused                                |
// | 0.5.1 - 0.5.5.x | list[(name, tensor)]          | refused: reads the bucket element-typed |
// | >= 0.5.6        | list[(name, tensor)]          | one uint8 tensor, metadata in bytes    |
//
// - 0.5.1 is the first release wsyncd knows to have all it needs on the IPC path: the HTTP route
//   with one base64 payload per TP rank (PR #4848, 2025-04), the rebuild that maps a GPU UUID to
//   the local device (PR #4565, 2025-03; wsyncd names the GPU by UUID, which an unpatched rebuild
//   reads as an index and fails on) and load_format "flattened_bucket" (PR #8079, 2025-07). Earlier
//   releases may have them, but which one first does was not pinned, so they are refused.
// - 0.5.6 is the first release after PR #13413 (merged 2025-11-17, after 0.5.5), which reads a
//   flattened bucket as uint8 bytes with byte offsets and any mix of dtypes. The receiver before
//   it slices the flat tensor in elements of its own dtype and casts each range's values to the
//   entry's dtype: wsyncd's uint8 bucket would load as garbage or fail to reshape. That receiver
//   needs one dtype per bucket, and a group's bucket rules are fixed from Capabilities() when the
//   group is created, before Probe reads the version; so wsyncd cannot promise one dtype per bucket
//   for such a server and refuses it, suggesting per_tensor, which every supported server reads.
//
// The map-once route (ipc_route "ipc", POST /update_weights_from_ipc) came with PR #11755
// (reviewed 2025-10-21, on main by 2025-10-30), which puts it in 0.5.4 or 0.5.5: the release was
// not pinned, so wsyncd asks for 0.5.5 (a 0.5.4 server that has it is refused, which is safe; one
// that lacked it would fail only at the first update). Its payload has no load_format: tensors are
// byte offsets in one mapped buffer, any mix of dtypes.
inline constexpr char kSglangMinIpcVersion[] = "0.5.1";
inline constexpr char kSglangMinIpcRouteVersion[] = "0.5.5";
inline constexpr char kSglangMinUint8FlattenedVersion[] = "0.5.6";

// What one SGLang server gets on the IPC transport.
struct SglangIpcVariant {
  std::string name;  // "ipc uint8-flattened" or "ipc per-tensor", for logs and `wsyncctl engines`
  BucketFormat format = BucketFormat::kFlattened;
};

// The variant `version` is served with `format` on the tensor route; FAILED_PRECONDITION naming
// the version and the minimum when the server is too old for it.
absl::StatusOr<SglangIpcVariant> SglangIpcVariantFor(const SglangVersion& version,
                                                     BucketFormat format);
// The same for the map-once route ("ipc stream"), where the format does not apply.
// `route_documented`: the server's OpenAPI document lists /update_weights_from_ipc, so a
// pre-release of 0.5.5 or later is served as its release (the gate is the route's).
absl::StatusOr<SglangIpcVariant> SglangIpcRouteVariantFor(const SglangVersion& version,
                                                          bool route_documented = false);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_VERSION_H_
