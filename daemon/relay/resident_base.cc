#include "daemon/relay/resident_base.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/delta/bucket_delta.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/relay/version_fingerprint.h"

namespace wsync {
namespace {

std::string Quoted(absl::string_view name) {
  return absl::StrCat("'", SanitizePeerText(name, kQuotedNameBytes), "'");
}

}  // namespace

std::shared_ptr<const ResidentBase> ResidentBase::Of(
    std::shared_ptr<const ResidentVersion::Kept> kept) {
  if (kept == nullptr || kept->version.empty()) return nullptr;
  auto base = std::shared_ptr<ResidentBase>(new ResidentBase(kept));
  VersionFingerprint print;
  for (size_t i = 0; i < kept->buckets.size(); ++i) {
    const ResidentVersion::Bucket& b = kept->buckets[i];
    print.Add(i, b.manifest, b.checksum);
    const uint8_t* data = b.memory == nullptr ? nullptr : b.memory->host_data();
    if (data == nullptr) return nullptr;
    for (const TensorEntry& t : b.manifest.tensors) {
      if (t.end() > b.memory->bytes()) return nullptr;
      base->tensors_[t.name] = Place{data + t.offset, t};
    }
  }
  base->fingerprint_ = print.Of(kept->version);
  return base;
}

absl::Status ResidentBase::Rebuild(const BucketManifest& manifest, absl::string_view frame,
                                   uint32_t crc32, absl::Span<uint8_t> out) const {
  if (!DeltaCoversSpan(manifest) || manifest.span_bytes() != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a delta's tensors leave gaps in the ", out.size(), " bytes of its bucket"));
  }
  for (const TensorEntry& t : manifest.tensors) {
    auto it = tensors_.find(t.name);
    if (it == tensors_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("a delta names tensor ", Quoted(t.name),
                                                        ", which version '", version(),
                                                        "' kept here does not hold"));
    }
    const TensorEntry& was = it->second.entry;
    if (was.dtype != t.dtype || was.shape != t.shape || was.length != t.length) {
      return absl::FailedPreconditionError(
          absl::StrCat("a delta's tensor ", Quoted(t.name), " is ", t.length,
                       " bytes of another dtype or shape than version '", version(),
                       "' kept here (", was.length, " bytes)"));
    }
    if (t.end() > out.size()) {
      return absl::OutOfRangeError(absl::StrCat("a delta's tensor ", Quoted(t.name),
                                                " ends past the bucket's ", out.size(), " bytes"));
    }
    std::memcpy(out.data() + t.offset, it->second.data, t.length);
  }
  // In place: the base's bytes were just written where the rebuilt ones go.
  WSYNC_RETURN_IF_ERROR(DecodeBucketDelta(manifest, out, frame, out));
  if (const uint32_t got = Crc32(out.data(), out.size()); got != crc32) {
    return absl::DataLossError(absl::StrCat("a bucket rebuilt from a delta against version '",
                                            version(), "' has CRC-32 ", Crc32Hex(got),
                                            ", the upstream's is ", Crc32Hex(crc32)));
  }
  return absl::OkStatus();
}

}  // namespace wsync
