#ifndef WSYNC_DAEMON_RELAY_RESIDENT_BASE_H_
#define WSYNC_DAEMON_RELAY_RESIDENT_BASE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/manifest.h"
#include "daemon/relay/resident_version.h"

namespace wsync {

// A downstream's resident version as the base of an update's deltas (docs/DELTA.md): its tensors
// by name, where this process's CPU can read them. Holds the version for as long as it lives, so
// a new version staged meanwhile does not free it.
class ResidentBase {
 public:
  // Null where there is no version, or it is kept where the CPU cannot read it (a GPU).
  static std::shared_ptr<const ResidentBase> Of(std::shared_ptr<const ResidentVersion::Kept> kept);

  const std::string& version() const { return kept_->version; }
  // Writes the bucket the frame describes into `out` (the bucket's span): each tensor's bytes in
  // this version, with the frame's changes applied. Refused, naming what was wrong, where a
  // tensor is not in this version as the manifest has it or the frame disagrees with the
  // manifest (then `out` holds nothing usable).
  absl::Status Rebuild(const BucketManifest& manifest, absl::string_view frame,
                       absl::Span<uint8_t> out) const;

 private:
  struct Place {
    const uint8_t* data;
    TensorEntry entry;
  };
  explicit ResidentBase(std::shared_ptr<const ResidentVersion::Kept> kept)
      : kept_(std::move(kept)) {}
  std::shared_ptr<const ResidentVersion::Kept> kept_;
  std::map<std::string, Place> tensors_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RESIDENT_BASE_H_
