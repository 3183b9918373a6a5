#ifndef WSYNC_TESTS_COMMON_DELTA_TEST_DATA_H_
#define WSYNC_TESTS_COMMON_DELTA_TEST_DATA_H_

// Buckets for the delta codecs' tests (the CPU codec's and the GPU's, which must agree): a
// manifest of tensors back to back, random bytes, a next version with a fraction of each tensor's
// elements changed, and malformed frames with what a decoder must name when it refuses them.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/manifest.h"

namespace wsync::delta_test {

// Tensors "t0", "t1", ... of the given dtypes and element counts, back to back.
inline BucketManifest Manifest(std::initializer_list<std::pair<DType, uint64_t>> tensors) {
  BucketManifest m;
  uint64_t at = 0;
  int i = 0;
  for (const auto& [dtype, elements] : tensors) {
    const uint64_t bytes = elements * DTypeSize(dtype);
    m.tensors.push_back(
        TensorEntry{"t" + std::to_string(i++), dtype, {static_cast<int64_t>(elements)}, at, bytes});
    at += bytes;
  }
  return m;
}

// Every width, odd counts (each width's tail after its last whole eight bytes), an empty tensor
// and one of many GPU blocks.
inline BucketManifest OddManifest() {
  return Manifest({{DType::kBfloat16, 20001},
                   {DType::kFloat32, 5003},
                   {DType::kInt8, 3001},
                   {DType::kFloat64, 701},
                   {DType::kBfloat16, 0},
                   {DType::kBfloat16, 1 << 20},
                   {DType::kUint8, 17}});
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// `base` with `fraction` of each tensor's elements changed (one byte of each, at random, so
// every lane of a word is tried); adds how many changed to `changed`.
inline std::vector<uint8_t> Changed(const BucketManifest& m, const std::vector<uint8_t>& base,
                                    double fraction, uint32_t seed, uint64_t* changed = nullptr) {
  std::vector<uint8_t> next = base;
  std::mt19937_64 rng(seed);
  for (const TensorEntry& t : m.tensors) {
    const size_t width = DTypeSize(t.dtype);
    const uint64_t n = t.length / width;
    std::vector<uint64_t> order(n);
    for (uint64_t i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const auto k = static_cast<uint64_t>(fraction * static_cast<double>(n) + 0.5);
    for (uint64_t j = 0; j < k; ++j) ++next[t.offset + order[j] * width + rng() % width];
    if (changed != nullptr) *changed += k;
  }
  return next;
}

// The bucket the malformed frames are made from: tensor 0 (64 float32) goes as gaps at 5 %.
inline BucketManifest MalformedManifest() {
  return Manifest({{DType::kFloat32, 64}, {DType::kBfloat16, 100}});
}

struct MalformedFrame {
  std::string frame;
  const char* named;  // what the refusal's message says
};

// `good`, MalformedManifest()'s frame with tensor 0 as gaps (its header at byte 8: form, count,
// size; its positions from byte 25), broken in every way a decoder must refuse.
inline std::vector<MalformedFrame> MalformedFrames(const std::string& good) {
  std::vector<MalformedFrame> out;
  const auto with = [&](size_t at, char byte, const char* named) {
    std::string f = good;
    f[at] = byte;
    out.push_back({std::move(f), named});
  };
  with(0, 'X', "does not start with \"WSD1\"");
  with(4, 3, "names 3 tensor(s); the bucket's manifest has 2");
  with(9, 100, "100 changed elements of 64");
  with(8, 7, "form 7");
  with(25, 0x7F, "lies past element 63");  // tensor 0's first position: 127 of 64 elements
  with(9, static_cast<char>(good[9] - 1), "delta of tensor 't0'");       // one value fewer
  with(25, static_cast<char>(0x80 | good[25]), "delta of tensor 't0'");  // runs into the next
  out.push_back({good.substr(0, good.size() - 1), "where"});
  out.push_back({good.substr(0, 20), "ends in its header"});
  out.push_back({good + "x", "1 byte(s) after its last tensor"});
  return out;
}

}  // namespace wsync::delta_test

#endif  // WSYNC_TESTS_COMMON_DELTA_TEST_DATA_H_
