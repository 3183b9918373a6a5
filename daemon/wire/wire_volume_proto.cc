#include "daemon/wire/wire_volume_proto.h"

namespace wsync {

void WireVolumeToProto(const WireVolume& volume, v1::WireVolume* out) {
  out->set_sent_bytes(volume.sent_bytes);
  out->set_dense_bytes(volume.dense_bytes);
  out->set_elements_compared(volume.elements_compared);
  out->set_elements_changed(volume.elements_changed);
  out->set_changed_fraction(volume.changed_fraction());
}

}  // namespace wsync
