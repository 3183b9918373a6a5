#ifndef WSYNC_DAEMON_WIRE_MANIFEST_PROTO_H_
#define WSYNC_DAEMON_WIRE_MANIFEST_PROTO_H_

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "wsync/v1/trainer.pb.h"

namespace wsync {

// A bucket's tensors as the wire carries them (a trainer's Bucket, a relay's RelayBucket) into a
// manifest: names and shapes bounded before anything quotes them, unknown dtypes refused. Ranges
// are not checked here (ValidateManifest is).
absl::StatusOr<BucketManifest> ManifestFromTensorSpecs(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& tensors);
// The same for a trainer's bucket.
inline absl::StatusOr<BucketManifest> ManifestFromProto(const v1::Bucket& bucket) {
  return ManifestFromTensorSpecs(bucket.tensors());
}
// A manifest's tensors onto the wire.
void ManifestToTensorSpecs(const BucketManifest& manifest,
                           google::protobuf::RepeatedPtrField<v1::TensorSpec>* out);

}  // namespace wsync

#endif  // WSYNC_DAEMON_WIRE_MANIFEST_PROTO_H_
