#include "daemon/relay/version_fingerprint.h"

#include "absl/strings/str_format.h"

namespace wsync {
namespace {

// FNV-1a, 64 bits: an identity check between two daemons that computed it from the same fields,
// not a defence against a forger (the relay's peers are authenticated).
class Fnv {
 public:
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001B3ull;
    }
  }
  void U64(uint64_t v) { Bytes(&v, sizeof(v)); }
  void Text(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xCBF29CE484222325ull;
};

}  // namespace

void VersionFingerprint::Add(uint64_t index, const BucketManifest& manifest, uint32_t crc32) {
  Fnv f;
  f.U64(index);
  f.U64(crc32);
  f.U64(manifest.tensors.size());
  for (const TensorEntry& t : manifest.tensors) {
    f.Text(t.name);
    f.U64(static_cast<uint64_t>(t.dtype));
    f.U64(t.shape.size());
    for (int64_t d : t.shape) f.U64(static_cast<uint64_t>(d));
    f.U64(t.offset);
    f.U64(t.length);
  }
  buckets_[index] = f.value();
}

std::string VersionFingerprint::Of(const std::string& version) const {
  Fnv f;
  f.Text(version);
  f.U64(buckets_.size());
  for (const auto& [index, h] : buckets_) {
    f.U64(index);
    f.U64(h);
  }
  return absl::StrFormat("%s#%016x", version, f.value());
}

}  // namespace wsync
