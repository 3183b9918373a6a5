#ifndef WSYNC_DAEMON_CORE_READ_IN_PLACE_H_
#define WSYNC_DAEMON_CORE_READ_IN_PLACE_H_

#include <cstdint>

namespace wsync {

// A colocated engine that reads a bucket in place maps the whole allocation its request names and
// unmaps it when the request ends (torch's rebuild_cuda_tensor, as SGLang, vLLM and LMDeploy
// receive), so every request pays for mapping the allocation, which grows with its size, while
// reading in place saves one copy of the bucket. So a pull-mode bucket that fits a slot is read in
// place only from an allocation of at most 1 GiB (whose mapping costs about what a slot's does)
// or at most 16 times the bucket's size; from a larger one (a whole model's flat buffer under
// small buckets) it is copied into a slot, which is mapped for less.
//
// Measured on H200 with the 14.19 GiB flat buffer of Qwen2.5-7B's shapes (docs/results/
// 2026-11-28-h200x4-runner-every-step.md, zero-copy against wsync/none): in place beat a slot's
// copy at 1 GiB buckets (14x: 1.36x the peers against 1.07x) and lost at 512 MiB (28x: 1.14x
// against 1.42x) and 128 MiB (1.08x against 1.40x); a request's mapping took 0.42 ms for 64 MiB,
// 0.47 ms for 1 GiB and 1.22 ms for 16 GiB (tests/bench/ipc_map_cost.py). A bucket larger than the
// slot it was given is read in place whatever its allocation, since that slot cannot hold it; a
// broadcast maps once per session and always reads in place.
inline constexpr uint64_t kInPlaceMaxAllocationPerBucket = 16;
inline constexpr uint64_t kInPlaceAnyBucketUpTo = uint64_t{1} << 30;

inline bool ReadInPlacePays(uint64_t allocation_bytes, uint64_t bucket_bytes) {
  if (allocation_bytes <= kInPlaceAnyBucketUpTo) return true;
  return allocation_bytes <= kInPlaceMaxAllocationPerBucket * bucket_bytes;
}

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_READ_IN_PLACE_H_
