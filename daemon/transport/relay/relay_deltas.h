#ifndef WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_DELTAS_H_
#define WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_DELTAS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/transport.h"
#include "daemon/transport/relay/delta_base.h"

namespace wsync {

// A relay group's buckets as deltas (docs/DELTA.md), upstream: each bucket is staged as the next
// base and, where the group allows deltas and the members' resident copies hold the base,
// encoded once against it into a staging slot of the bucket's own slot (free again when that
// slot is), for the members holding the base to receive instead of the span. Counts what each
// update sent against its dense bytes. The CPU codec: buckets on a GPU go dense, saying why once.
// Thread-safe.
class RelayDeltas {
 public:
  RelayDeltas(Platform* platform, bool enabled, uint64_t cap_bytes)
      : platform_(platform), enabled_(enabled), base_(cap_bytes) {}

  struct Frame {
    std::string base;  // the version it is against; "" (and slot null): dense for every member
    SlotMemory* slot = nullptr;
    uint64_t bytes = 0;
    // The bucket's elements compared with the base, and those that changed (0 where it was not
    // compared); set also where the frame came out no smaller and the bucket goes dense.
    uint64_t elements_compared = 0;
    uint64_t elements_changed = 0;
  };

  // The group sends deltas where it can (its "delta" option is not "off").
  bool enabled() const { return enabled_; }
  // An update to `version` begins; the base is settled at its first bucket, once the members
  // said what they hold.
  void Begin(const std::string& version);
  // Bucket `index` (`span` bytes of `source`, CRC-32 `crc32`) as a delta for the members whose
  // resident version is the base; `held`: every member's resident version ("" none). A bucket
  // whose tensors leave gaps in its span goes dense (a delta carries the tensors only).
  Frame Encode(const BucketSource& source, const BucketManifest& manifest, uint64_t span,
               uint64_t index, uint32_t crc32, const std::vector<std::string>& held);
  // One member's leg of a bucket: its dense bytes and the bytes it was sent.
  void Count(uint64_t dense_bytes, uint64_t sent_bytes);
  // The update's totals as a sentence ("" where deltas are off or nothing was sent).
  std::string Summary() const;

 private:
  Platform* const platform_;
  const bool enabled_;
  DeltaBase base_;
  mutable std::mutex mu_;
  std::string version_;           // guarded by mu_: the open update's
  bool settled_ = false;          // guarded by mu_: the base was settled for it
  std::string why_dense_;         // guarded by mu_: why buckets went dense, said once per update
  std::vector<uint8_t> scratch_;  // guarded by mu_: the base's bytes laid out as the bucket
  std::map<const SlotMemory*, std::unique_ptr<SlotMemory>> staging_;        // guarded by mu_
  uint64_t dense_bytes_ = 0, sent_bytes_ = 0, elements_ = 0, changed_ = 0;  // guarded by mu_
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_RELAY_RELAY_DELTAS_H_
