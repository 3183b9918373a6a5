#ifndef WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_OPTIONS_H_

#include <string>

#include "absl/time/time.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// A relay group's settings for its members, the downstream wsyncds: how long the upstream waits
// for a downstream's local commit (its engines load the buckets its slots still hold, then
// record the version).
class WsyncdOptions final : public EngineOptions {
 public:
  WsyncdOptions() = default;
  explicit WsyncdOptions(absl::Duration commit_timeout) : commit_timeout_(commit_timeout) {}

  absl::string_view kind() const override { return "wsyncd"; }
  absl::Status Validate() const override;
  // A downstream compares its own engines' weights (its local groups' check_weights).
  absl::Status WeightCheckerSupported() const override {
    return absl::InvalidArgumentError(
        "a relay group's members are daemons: set check_weights on the downstreams' local groups");
  }
  bool Equals(const EngineOptions& other) const override;
  std::string Describe() const override;

  absl::Duration commit_timeout() const { return commit_timeout_; }

 private:
  absl::Duration commit_timeout_ = absl::Minutes(5);
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_OPTIONS_H_
