#include "daemon/engines/wsyncd/wsyncd_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::Status WsyncdOptions::Validate() const {
  if (commit_timeout_ < absl::Seconds(1) || commit_timeout_ > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wsyncd commit_timeout_seconds must be 1 to 86400, not ",
                     absl::ToDoubleSeconds(commit_timeout_)));
  }
  return absl::OkStatus();
}

bool WsyncdOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const WsyncdOptions*>(&other);
  return o != nullptr && o->commit_timeout_ == commit_timeout_;
}

std::string WsyncdOptions::Describe() const {
  return absl::StrCat("commit_timeout_seconds=", absl::ToDoubleSeconds(commit_timeout_));
}

}  // namespace wsync
