#ifndef WSYNC_DAEMON_RELAY_VERSION_FINGERPRINT_H_
#define WSYNC_DAEMON_RELAY_VERSION_FINGERPRINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/manifest.h"

namespace wsync {

// What names a relayed version's bytes, not only its label (docs/DELTA.md): the label, then a
// hash of every bucket in the update's order (its index, its tensors' names, dtypes, shapes and
// places, and the CRC-32 of its span), so a label a trainer pushed twice with other bytes, or an
// update cut short, never passes for the version a node holds. Both ends of a relay hop compute
// it from the same buckets: the upstream as it sends them, a downstream from its resident copy.
class VersionFingerprint {
 public:
  // Adds bucket `index` (in any order; a bucket added twice counts once, the last time).
  void Add(uint64_t index, const BucketManifest& manifest, uint32_t crc32);
  // "<version>#<16 hex digits>".
  std::string Of(const std::string& version) const;

 private:
  std::map<uint64_t, uint64_t> buckets_;  // index -> the bucket's hash
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_VERSION_FINGERPRINT_H_
