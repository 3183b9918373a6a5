#include "daemon/relay/relay_frames.h"

#include "absl/strings/str_cat.h"
#include "daemon/wire/manifest_proto.h"

namespace wsync {

absl::StatusOr<BucketManifest> ReadRelayBucket(const v1::RelayBucket& bucket, uint64_t slot_bytes) {
  const auto refused = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("relayed bucket ", bucket.index(), " is refused: ", why));
  };
  if (bucket.tensors_size() > kMaxRelayBucketTensors) {
    return refused(
        absl::StrCat(bucket.tensors_size(), " tensors, more than ", kMaxRelayBucketTensors));
  }
  absl::StatusOr<BucketManifest> manifest = ManifestFromTensorSpecs(bucket.tensors());
  if (!manifest.ok()) return refused(manifest.status().message());
  if (absl::Status fits = ValidateManifest(*manifest, slot_bytes); !fits.ok()) {
    return refused(
        absl::StrCat(fits.message(), " (this wsyncd's slots hold ", slot_bytes, " bytes)"));
  }
  return manifest;
}

}  // namespace wsync
