#include "daemon/engines/bucket_format.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::StatusOr<BucketFormat> ParseBucketFormat(absl::string_view name) {
  if (name == "flattened_bucket") return BucketFormat::kFlattened;
  // "null" is what the engines' requests carry for it; both spellings name one layout.
  if (name == "per_tensor" || name == "null") return BucketFormat::kPerTensor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown bucket format '", name, "' (flattened_bucket, per_tensor or null)"));
}

absl::string_view BucketFormatName(BucketFormat format) {
  return format == BucketFormat::kFlattened ? "flattened_bucket" : "per_tensor";
}

}  // namespace wsync
