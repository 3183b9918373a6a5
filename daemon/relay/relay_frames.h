#ifndef WSYNC_DAEMON_RELAY_RELAY_FRAMES_H_
#define WSYNC_DAEMON_RELAY_RELAY_FRAMES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "wsync/v1/relay.pb.h"

namespace wsync {

// The most tensors one relayed bucket may name (a trainer's bucket is bounded the same way by its
// slot; this bounds the work before the slot check).
inline constexpr int kMaxRelayBucketTensors = 1 << 20;

// A bucket frame from the upstream, read before a byte of it is received: its tensors as a
// manifest that fits one of this downstream's slots of `slot_bytes` (ValidateManifest: names,
// dtypes, shapes, ranges inside the slot, no overlap). INVALID_ARGUMENT naming the bucket's index
// and what is wrong; texts from the peer are sanitized.
absl::StatusOr<BucketManifest> ReadRelayBucket(const v1::RelayBucket& bucket, uint64_t slot_bytes);

}  // namespace wsync

#endif  // WSYNC_DAEMON_RELAY_RELAY_FRAMES_H_
