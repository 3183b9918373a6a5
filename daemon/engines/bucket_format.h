#ifndef WSYNC_DAEMON_ENGINES_BUCKET_FORMAT_H_
#define WSYNC_DAEMON_ENGINES_BUCKET_FORMAT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// How an engine receives a bucket, in the words both SGLang and LMDeploy use for their
// load_format: "flattened_bucket", one buffer holding the bucket's tensors back to back (SGLang's
// uint8 broadcast or view; LMDeploy's view typed as the bucket's one dtype), or null, each tensor
// on its own in its own dtype (wsync calls that per_tensor).
enum class BucketFormat { kFlattened, kPerTensor };

// "flattened_bucket", or "per_tensor" and the engines' own "null" for kPerTensor.
absl::StatusOr<BucketFormat> ParseBucketFormat(absl::string_view name);
// "flattened_bucket" or "per_tensor".
absl::string_view BucketFormatName(BucketFormat format);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_BUCKET_FORMAT_H_
