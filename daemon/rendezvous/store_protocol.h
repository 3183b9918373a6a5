#ifndef WSYNC_DAEMON_RENDEZVOUS_STORE_PROTOCOL_H_
#define WSYNC_DAEMON_RENDEZVOUS_STORE_PROTOCOL_H_

// The request side of torch's TCPStore wire protocol (docs/engines/tcpstore.md): frames
// parsed from whatever bytes have arrived, with every length checked against the store's limits
// before anything is allocated for it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace wsync {

enum class StoreCommand : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
};

// What one store accepts. The sizes bound the memory one client can make the daemon hold (a torch
// rank's keys and values are a few hundred bytes: the NCCL id is 128); the times bound how long
// one client can hold a connection without doing what a torch client does.
struct StoreLimits {
  size_t max_key_bytes = 8 << 10;
  size_t max_value_bytes = 1 << 20;
  uint64_t max_keys_per_request = 4096;
  // One request's whole frame, and one reply (MULTI_GET gathers many values).
  size_t max_request_bytes = 4 << 20;
  size_t max_reply_bytes = 4 << 20;
  // Keys plus values the store holds.
  size_t max_data_bytes = 16 << 20;
  // Open connections; more are accepted and closed at once.
  int max_connections = 64;
  // From accept to VALIDATE.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // From a request's first byte to its last, and for a reply to drain.
  absl::Duration frame_timeout = absl::Seconds(30);
  // A validated connection the store does not hold (StoreState::Holds: an engine rank, or one
  // that ADDed "init/" while ranks are still awaited) is closed after this long without a
  // request, WAIT pending or not. Engine ranks are never closed for idling: their connection is
  // how the daemon sees the engine is alive.
  absl::Duration idle_timeout = absl::Seconds(120);
};

struct StoreRequest {
  StoreCommand command = StoreCommand::kValidate;
  uint32_t u32 = 0;   // VALIDATE's magic, PING's nonce
  int64_t delta = 0;  // ADD
  std::vector<std::string> keys;
  // SET and APPEND: one; COMPARE_SET: expected then desired; MULTI_SET: one per key.
  std::vector<std::string> values;
};

struct StoreParse {
  enum Kind { kNeedMore, kMalformed, kComplete };
  Kind kind = kNeedMore;
  // kNeedMore: the buffered size below which parsing again cannot get further.
  size_t need = 1;
  // kComplete: the frame's length.
  size_t consumed = 0;
  // kMalformed: which rule the frame broke.
  std::string error;
  StoreRequest request;
};

// Parses the first frame of `buffered`. A frame that announces a length over a limit is
// malformed as soon as the length is read, so the caller never waits for (or buffers) it.
StoreParse ParseStoreRequest(absl::string_view buffered, const StoreLimits& limits);

// Reply encodings.
void AppendStoreU64(std::string* out, uint64_t v);
void AppendStoreBytes(std::string* out, absl::string_view bytes);

}  // namespace wsync

#endif  // WSYNC_DAEMON_RENDEZVOUS_STORE_PROTOCOL_H_
