// Fuzzes what an upstream wsyncd's bucket frames carry to a downstream (the node relay): the wire
// message (v1::RelayDown, parsed as gRPC parses it) and ReadRelayBucket, which a downstream runs
// before it receives a byte of the bucket, against slots of 1 MiB.
//
// Input: the serialized RelayDown.
//
// Invariants: nothing crashes or is undefined (the sanitizers watch); an accepted bucket names
// 1..kMaxRelayBucketTensors tensors whose ranges lie inside the slot and pass ValidateManifest;
// every refusal's message is valid UTF-8 without control characters, since it reaches the
// downstream's log and goes back to the upstream.

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/core/peer_text.h"
#include "daemon/relay/relay_frames.h"
#include "tests/fuzz/fuzz_check.h"
#include "wsync/v1/relay.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wsync;  // NOLINT(build/namespaces): a fuzz entry point
  constexpr uint64_t kSlot = 1 << 20;
  v1::RelayDown down;
  if (!down.ParseFromArray(data, static_cast<int>(size)) || !down.has_request() ||
      !down.request().has_bucket()) {
    return 0;
  }
  const absl::StatusOr<BucketManifest> read = ReadRelayBucket(down.request().bucket(), kSlot);
  if (!read.ok()) {
    const std::string message(read.status().message());
    FUZZ_CHECK(SanitizePeerText(message, message.size() + 1) == message, message);
    return 0;
  }
  FUZZ_CHECK(!read->tensors.empty(), "an empty bucket");
  FUZZ_CHECK(read->tensors.size() <= static_cast<size_t>(kMaxRelayBucketTensors), "tensors");
  FUZZ_CHECK(read->span_bytes() <= kSlot, "past the slot");
  for (const TensorEntry& t : read->tensors) {
    FUZZ_CHECK(t.offset <= kSlot && t.length <= kSlot - t.offset, t.name);
  }
  FUZZ_CHECK(ValidateManifest(*read, kSlot).ok(), "accepted but invalid");
  return 0;
}
