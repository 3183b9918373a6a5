#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_BROADCAST_BINDING_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_BROADCAST_BINDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"

namespace wsync {

// The broadcast data path: wsyncd is rank 0 of the engines' weight-update collective and
// broadcasts each bucket while each engine's update request receives it. This header is the
// whole contract between the broadcast transport and the engines that speak it: an engine kind
// implements BroadcastBinding (daemon/engines/<kind>/<kind>_broadcast_binding.*), the transport
// calls nothing else of the engine's on this path.
inline constexpr absl::string_view kBroadcastDataPath = "broadcast";

// How an engine's ranks can join a collective with wsyncd.
enum class RendezvousMode {
  kTorchStore,      // torch's TCPStore: each rank's ProcessGroupNCCL reads the NCCL id from it
  kUniqueIdInInit,  // the NCCL unique id travels in the init request; no store
  kStatelessStore,  // a TCPStore read the way a stateless process group (no torch.distributed)
                    // reads it: a rank's keys, then the NCCL id
};

absl::string_view RendezvousModeName(RendezvousMode mode);

// Where engines meet wsyncd to join one instance of a group's collective.
struct Rendezvous {
  std::string master_address;  // the store ("" and port 0 without one)
  uint16_t master_port = 0;
  uint32_t world_size = 0;
  std::string group_name;
  RendezvousMode mode = RendezvousMode::kTorchStore;
  // kUniqueIdInInit: rank 0's 128-byte id, which the init request carries; "" otherwise.
  std::string unique_id;
};

class BroadcastBinding : public DataPathBinding {
 public:
  absl::string_view data_path() const final { return kBroadcastDataPath; }
  // The ways the engine's ranks can meet rank 0, the one its group's options chose first.
  virtual std::vector<RendezvousMode> RendezvousModes() const = 0;
  // True where DestroyGroup makes the engine's ranks tear their communicator down with rank 0
  // (torch finalizes it with its peers). False for an engine with no such route: rank 0 then
  // aborts its side alone, since a finalize would wait for peers that never take part.
  virtual bool LeavesGroup() const { return true; }
  // Asks the engine's ranks to join the group's collective; returns once they have (or failed).
  virtual absl::Status InitGroup(const Rendezvous& rendezvous) = 0;
  virtual absl::Status DestroyGroup(const std::string& group_name) = 0;
  // The bucket's update request; the engine answers once it has received (through the
  // broadcast, meanwhile) and loaded the bucket.
  virtual absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                                      const std::string& group_name,
                                                      const BucketContext& context) const = 0;
  // The collective calls the engine's receive expects for the bucket, in order.
  virtual absl::StatusOr<std::vector<BroadcastPiece>> Pieces(
      const BucketManifest& manifest) const = 0;
};

// The adapter's broadcast binding; FAILED_PRECONDITION naming the engine where it has none.
absl::StatusOr<BroadcastBinding*> BroadcastBindingOf(EngineAdapter& adapter);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_BROADCAST_BINDING_H_
