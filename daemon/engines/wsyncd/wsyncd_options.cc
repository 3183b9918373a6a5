#include "daemon/engines/wsyncd/wsyncd_options.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace wsync {

absl::Status WsyncdOptions::Validate() const {
  if (commit_timeout_ < absl::Seconds(1) || commit_timeout_ > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wsyncd commit_timeout_seconds must be 1 to 86400, not ",
                     absl::ToDoubleSeconds(commit_timeout_)));
  }
  if (streams_.size() > kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrCat("wsyncd streams names ", streams_.size(), " devices; at most ", kMaxStreams));
  }
  std::set<int> seen;
  for (int device : streams_) {
    if (device < 0 || device > 1023) {
      return absl::InvalidArgumentError(
          absl::StrCat("wsyncd streams: device ", device, " is not a device index (0 to 1023)"));
    }
    if (!seen.insert(device).second) {
      return absl::InvalidArgumentError(absl::StrCat("wsyncd streams names device ", device,
                                                     " twice: each stream is a device of its own"));
    }
  }
  return absl::OkStatus();
}

bool WsyncdOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const WsyncdOptions*>(&other);
  return o != nullptr && o->commit_timeout_ == commit_timeout_ && o->streams_ == streams_ &&
         o->deltas_ == deltas_;
}

std::string WsyncdOptions::Describe() const {
  return absl::StrCat(
      "commit_timeout_seconds=", absl::ToDoubleSeconds(commit_timeout_),
      streams_.empty() ? "" : absl::StrCat(" streams=", absl::StrJoin(streams_, ",")),
      deltas_ ? "" : " delta=off");
}

}  // namespace wsync
