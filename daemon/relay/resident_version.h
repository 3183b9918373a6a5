#ifndef WSYNC_DAEMON_RELAY_RESIDENT_VERSION_H_
#define WSYNC_DAEMON_RELAY_RESIDENT_VERSION_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"

namespace wsync {

// How a downstream keeps its resident version: `--resident none|host|gpu` and its cap.
struct ResidentOptions {
  std::optional<ResidentMedium> medium;  // nullopt: none is kept
  uint64_t cap_bytes = uint64_t{64} << 30;
};
// "none", "host" or "gpu"; INVALID_ARGUMENT naming the three otherwise.
absl::StatusOr<std::optional<ResidentMedium>> ParseResidentMedium(const std::string& text);

// The last version a relay downstream received whole, every bucket checked against the
// trainer's CRC-32 by its local update, kept apart from the slots (docs/RELAY.md, "Resident
// version"): an engine that restarts, or a group created later, is brought to it with no trainer.
// An update's buckets are staged as they arrive and become the resident version only when the
// local update commits; until then the previous one stays. The cap bounds what is held in all:
// when an update's buckets need the room, the previous version is dropped first (it is about to
// be replaced), and a version larger than the cap is not kept at all, with both sizes said.
// Thread-safe.
class ResidentVersion {
 public:
  struct Bucket {
    BucketManifest manifest;
    uint32_t checksum = 0;  // CRC-32 of the span, as the trainer computed it
    bool last = false;
    std::unique_ptr<ResidentMemory> memory;
  };
  // A whole version, immutable once resident: a replay holds it while a newer one replaces it.
  struct Kept {
    std::string version;
    std::vector<Bucket> buckets;
    uint64_t bytes = 0;
    absl::Time since;
  };
  struct View {
    ResidentMedium medium = ResidentMedium::kHost;
    uint64_t cap_bytes = 0;
    std::string version;  // "" when none is kept
    uint64_t bytes = 0;   // held now, the staged buckets included
    uint64_t buckets = 0;
    std::string why_none;  // why the last version was not kept; "" when it was
  };

  ResidentVersion(Platform* platform, int device, ResidentMedium medium, uint64_t cap_bytes);

  // An update to `version` begins; what an earlier one staged is dropped.
  void Begin(const std::string& version);
  // Keeps the bucket that `slot` holds (received, not yet handed on). An error says why this
  // version will not be kept (over the cap, no memory); the update goes on without keeping it.
  absl::Status Keep(const BucketManifest& manifest, uint32_t checksum, bool last, SlotMemory& slot);
  // The update committed: what it staged becomes the resident version, or, where it could not
  // keep every bucket, none is (the previous one no longer is the last version).
  void Commit();
  // The update ended without its commit: the staged buckets are dropped; the resident version
  // stays.
  void Abort();
  // The kept version must not be served (the upstream's update did not land): it is dropped, and
  // `why` says so in the status.
  void Withdraw(const std::string& why);

  std::shared_ptr<const Kept> Current() const;
  View Status() const;

 private:
  Platform* const platform_;
  const int device_;
  const ResidentMedium medium_;
  const uint64_t cap_bytes_;
  mutable std::mutex mu_;
  std::shared_ptr<const Kept> current_;  // guarded by mu_
  std::unique_ptr<Kept> staged_;         // guarded by mu_; null outside an update
  bool staging_failed_ = false;          // guarded by mu_
  std::string why_none_;                 // guarded by mu_
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RESIDENT_VERSION_H_
