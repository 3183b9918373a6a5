#ifndef WSYNC_DAEMON_CORE_WIRE_VOLUME_H_
#define WSYNC_DAEMON_CORE_WIRE_VOLUME_H_

#include <cstdint>

namespace wsync {

// What a transport that can send less than a bucket's bytes (a relay group's deltas,
// docs/DELTA.md) put on the wire, summed over its legs (one per member it sent to): the bytes sent
// against the bytes the same legs would have sent dense, and the elements its encoder compared
// with the base and found changed. Transports that always send the bytes report none.
struct WireVolume {
  uint64_t sent_bytes = 0;
  uint64_t dense_bytes = 0;
  uint64_t elements_compared = 0;
  uint64_t elements_changed = 0;

  WireVolume& operator+=(const WireVolume& other) {
    sent_bytes += other.sent_bytes;
    dense_bytes += other.dense_bytes;
    elements_compared += other.elements_compared;
    elements_changed += other.elements_changed;
    return *this;
  }
  // Of the elements compared, the fraction that changed (0 when none were compared).
  double changed_fraction() const {
    return elements_compared == 0
               ? 0
               : static_cast<double>(elements_changed) / static_cast<double>(elements_compared);
  }
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_WIRE_VOLUME_H_
