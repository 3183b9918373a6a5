#ifndef WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// A relay group's settings for its members, the downstream wsyncds: how long the upstream waits
// for a downstream's local commit (its engines load the buckets its slots still hold, then
// record the version), and the group's streams: the devices, one trainer rank pushing to each,
// that each send their own buckets to every member on a pair of their own (none: one stream,
// from the group's device), and whether buckets may cross as deltas against the version the
// members hold (`delta`: auto, the default, or off; docs/DELTA.md).
class WsyncdOptions final : public EngineOptions {
 public:
  WsyncdOptions() = default;
  explicit WsyncdOptions(absl::Duration commit_timeout, std::vector<int> streams = {},
                         bool deltas = true)
      : commit_timeout_(commit_timeout), streams_(std::move(streams)), deltas_(deltas) {}

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
  std::vector<int> stream_devices() const override { return streams_; }
  bool deltas() const { return deltas_; }

  // How many streams one relay group may have: more devices than a node holds is a mistake.
  static constexpr size_t kMaxStreams = 64;

 private:
  absl::Duration commit_timeout_ = absl::Minutes(5);
  std::vector<int> streams_;
  bool deltas_ = true;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_OPTIONS_H_
