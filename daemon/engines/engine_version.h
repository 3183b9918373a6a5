#ifndef WSYNC_DAEMON_ENGINES_ENGINE_VERSION_H_
#define WSYNC_DAEMON_ENGINES_ENGINE_VERSION_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// An engine's release as its server reports it (SGLang's /get_server_info "version", vLLM's
// /version): "0.5.6", "v0.22.1", "0.5.6.post1", "0.5.3rc2", "0.23.0+cu130", "0.5.6.dev12+g1a2b".
// A post release is its release with fixes and a local label ("+cu130") names a build of it, so
// both count as the release; any other suffix (rc, dev, a, b, unknown) orders before its release:
// a build from between two releases may or may not hold what the later one ships, so it is
// served as the release before.
struct EngineVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
  bool prerelease = false;
  std::string text;  // as the engine sent it, whitespace trimmed

  // Orders by (major, minor, patch), a pre-release before its release.
  bool AtLeast(int major, int minor, int patch) const;
};

// The text goes into errors and `wsyncctl engines`: longer than this, or with characters other
// than letters, digits, '.', '+', '-', '_', it is refused (INVALID_ARGUMENT) unread, as is text
// that is not MAJOR.MINOR[.PATCH][suffix].
inline constexpr size_t kMaxEngineVersionChars = 64;
absl::StatusOr<EngineVersion> ParseEngineVersion(absl::string_view text);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_ENGINE_VERSION_H_
