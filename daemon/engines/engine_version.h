#ifndef WSYNC_DAEMON_ENGINES_ENGINE_VERSION_H_
#define WSYNC_DAEMON_ENGINES_ENGINE_VERSION_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// An engine's release as its server reports it (SGLang's /get_server_info "version", vLLM's
// /version), read as PEP 440 reads a Python package's version, which is what these servers
// report: "0.5.6", "v0.22.1", "0.5.6.post1", "0.5.3rc2", "0.23.0+cu130", "0.11.1rc2.dev123+gabc".
// A post release is its release with fixes and a local label ("+cu130") names a build of it, so
// both count as the release. A pre-release (a, b, rc), a dev release and a vendor suffix PEP 440
// does not know ("0.17.0-sim") order before their release: a build from before a release may or
// may not hold what the release ships, so a gate that needs the release refuses it, saying so
// (Described()).
struct EngineVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
  bool prerelease = false;
  std::string text;  // as the engine sent it, whitespace trimmed
  // The suffix as read: "a1", "b2", "rc3" (normalised from alpha, beta, c, pre, preview), the
  // post and dev numbers (-1: none), the local label after '+', and any other suffix.
  std::string pre;
  int post = -1;
  int dev = -1;
  std::string local;
  std::string vendor;

  // Orders by (major, minor, patch), a pre-release before its release.
  bool AtLeast(int major, int minor, int patch) const;
  // The same, a pre-release counted as the release it precedes: for a gate that decides by a
  // route the probe found (the route, not the build date, says what the server has).
  bool ReleaseAtLeast(int major, int minor, int patch) const;
  // The release this version is, or precedes: "MAJOR.MINOR.PATCH".
  std::string Release() const;
  // The text and how it was read, for messages: "0.5.6", "0.17.0-sim, a pre-release of 0.17.0
  // (vendor suffix '-sim')", "0.11.1rc2.dev123+gabc, a pre-release of 0.11.1 (rc2, dev123, build
  // gabc)", "0.5.6.post1, a post release of 0.5.6", "0.23.0+cu130, a build of 0.23.0 (cu130)".
  std::string Described() const;
};

// The text goes into errors and `wsyncctl engines`: longer than this, or with characters other
// than letters, digits, '.', '+', '-', '_', it is refused (INVALID_ARGUMENT) unread, as is text
// that is not MAJOR.MINOR[.PATCH][suffix].
inline constexpr size_t kMaxEngineVersionChars = 64;
absl::StatusOr<EngineVersion> ParseEngineVersion(absl::string_view text);

// A group's "engine_version" option (every kind that gates on versions takes it): the version
// gates read its engines as this release, whatever they report. It is the way through for a
// nightly or vendor build that has what a release ships where wsyncd cannot probe for it (payload
// formats). Only a plain release (MAJOR.MINOR.PATCH) is taken; errors name `kind`'s option.
absl::StatusOr<EngineVersion> ParseEngineVersionOption(absl::string_view kind,
                                                       absl::string_view text);
// What the gates read: the option's release where set, its text saying both ("0.17.0-sim, read as
// 0.17.0 (the group's engine_version)"); else the engine's own.
EngineVersion GateVersion(const EngineVersion& reported, const EngineVersion* forced);
// How a refusal of `read` ends: how to serve the build as another release.
std::string EngineVersionOverrideHint(const EngineVersion& read);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_ENGINE_VERSION_H_
