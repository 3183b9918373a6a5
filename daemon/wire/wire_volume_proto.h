#ifndef WSYNC_DAEMON_WIRE_WIRE_VOLUME_PROTO_H_
#define WSYNC_DAEMON_WIRE_WIRE_VOLUME_PROTO_H_

#include "daemon/core/wire_volume.h"
#include "wsync/v1/trainer.pb.h"

namespace wsync {

// An update's wire volume as results, the update history and progress carry it.
void WireVolumeToProto(const WireVolume& volume, v1::WireVolume* out);

}  // namespace wsync

#endif  // WSYNC_DAEMON_WIRE_WIRE_VOLUME_PROTO_H_
