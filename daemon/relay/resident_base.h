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

  // The version's fingerprint (VersionFingerprint): what the upstream's deltas name.
  const std::string& version() const { return fingerprint_; }
  // Writes the bucket the frame describes into `out` (the bucket's span): each tensor's bytes in
  // this version, with the frame's changes applied, then checks the result against `crc32`, the
  // upstream's CRC-32 of the span (DATA_LOSS where it differs: whatever checksum setting the
  // local update runs with, a wrong rebuild never goes on). Refused, naming what was wrong, where
  // a tensor is not in this version as the manifest has it, the tensors leave gaps in the span
  // or the frame disagrees with the manifest (then `out` holds nothing usable).
  absl::Status Rebuild(const BucketManifest& manifest, absl::string_view frame, uint32_t crc32,
                       absl::Span<uint8_t> out) const;

 private:
  struct Place {
    const uint8_t* data;
    TensorEntry entry;
  };
  explicit ResidentBase(std::shared_ptr<const ResidentVersion::Kept> kept)
      : kept_(std::move(kept)) {}
  std::shared_ptr<const ResidentVersion::Kept> kept_;
  std::string fingerprint_;
  std::map<std::string, Place> tensors_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RESIDENT_BASE_H_
