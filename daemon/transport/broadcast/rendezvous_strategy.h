#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_RENDEZVOUS_STRATEGY_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_RENDEZVOUS_STRATEGY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/transport/broadcast/broadcast_binding.h"

namespace wsync {

// How the engine ranks of a broadcast group find rank 0's communicator: one strategy per
// rendezvous mode (RendezvousMode: torch's TCPStore in its two layouts, vLLM's base64 unique id).
// The transport calls it under its own lock, one call at a time.
class RendezvousStrategy {
 public:
  virtual ~RendezvousStrategy() = default;
  // Opens a meeting point for `world_size` ranks and publishes rank 0's `unique_id` there;
  // returns what the engines are told in their init requests.
  virtual absl::StatusOr<Rendezvous> Open(const std::string& group_name,
                                          const std::string& unique_id, uint32_t world_size) = 0;
  // Waits until every engine rank has reached the meeting point; the error says how many did.
  virtual absl::Status WaitJoined(absl::Time deadline) = 0;
  // What the meeting point saw that explains a failed bucket (ranks that never fetched the id,
  // keys waited for under another name), or "" when it saw nothing wrong.
  virtual std::string Diagnose() const = 0;
  // FAILED_PRECONDITION saying who left when an engine rank that joined has left since (its
  // engine restarted or died).
  virtual absl::Status CheckJoined() const = 0;
  // "host:port" engines connect to, or "" while closed (or when there is no store).
  virtual std::string address() const = 0;
  virtual void Close() = 0;
  virtual RendezvousMode mode() const = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_RENDEZVOUS_STRATEGY_H_
