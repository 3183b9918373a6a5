#ifndef WSYNC_TESTS_RELIABILITY_BAD_BUCKETS_H_
#define WSYNC_TESTS_RELIABILITY_BAD_BUCKETS_H_

// Buckets a broken or hostile trainer could send, one per rule wsyncd checks before any byte
// leaves a slot (ManifestFromProto, ValidateManifest, the group's flattened layout, the names'
// bounds, the slot index, the checksum).

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "tests/service/service_fixture.h"

namespace wsync {

struct BadBucket {
  std::string what;
  v1::Bucket bucket;
  // Refused before wsyncd's code sees it (gRPC's proto3 parser), with whatever code gRPC gives.
  bool refused_by_grpc = false;
};

inline std::vector<BadBucket> BadBuckets(uint64_t slot_bytes) {
  std::vector<BadBucket> out;
  auto add = [&](std::string what, std::vector<v1::TensorSpec> tensors, uint32_t slot = 0) {
    BadBucket b{std::move(what), {}};
    b.bucket.set_slot(slot);
    b.bucket.set_last(true);
    for (auto& t : tensors) *b.bucket.add_tensors() = std::move(t);
    out.push_back(std::move(b));
  };
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  add("no tensors", {});
  add("overlapping tensors", {Spec("a", "uint8", {64}, 0, 64), Spec("b", "uint8", {64}, 32, 64)});
  add("range past the slot", {Spec("a", "uint8", {64}, slot_bytes - 32, 64)});
  add("offset + length wraps", {Spec("a", "uint8", {16}, kMax - 7, 16)});
  add("length is not shape x item size", {Spec("a", "bfloat16", {3}, 0, 7)});
  add("negative dimension", {Spec("a", "uint8", {-4}, 0, 4)});
  add("shape overflows", {Spec("a", "uint8", {1ll << 40, 1ll << 40}, 0, 0)});
  add("misaligned offset", {Spec("a", "uint8", {1}, 0, 1), Spec("b", "bfloat16", {2}, 1, 4)});
  add("unknown dtype", {Spec("a", "float128", {4}, 0, 64)});
  add("duplicate names", {Spec("a", "uint8", {8}, 0, 8), Spec("a", "uint8", {8}, 8, 8)});
  add("empty name", {Spec("", "uint8", {8}, 0, 8)});
  add("name of 64 KiB", {Spec(std::string(64 << 10, 'n'), "uint8", {8}, 0, 8)});
  add("unprintable name", {Spec("a\x01\x1b[2J", "uint8", {8}, 0, 8)});
  add("gap in a flattened bucket", {Spec("a", "uint8", {8}, 64, 8)});
  add("slot that does not exist", {Spec("a", "uint8", {8}, 0, 8)}, /*slot=*/7);
  add("checksum that does not match", {Spec("a", "uint8", {8}, 0, 8)});
  out.back().bucket.set_checksum(0xdeadbeef);
  add("name that is not UTF-8", {Spec("a\xff\xfe", "uint8", {8}, 0, 8)});
  out.back().refused_by_grpc = true;
  return out;
}

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_BAD_BUCKETS_H_
