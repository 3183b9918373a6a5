#include "daemon/engines/sglang/sglang_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::StatusOr<BucketFormat> ParseBucketFormat(absl::string_view name) {
  if (name == "flattened_bucket") return BucketFormat::kFlattened;
  if (name == "per_tensor") return BucketFormat::kPerTensor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown bucket format '", name, "' (flattened_bucket, per_tensor)"));
}

absl::string_view BucketFormatName(BucketFormat format) {
  return format == BucketFormat::kFlattened ? "flattened_bucket" : "per_tensor";
}

bool SglangOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const SglangOptions*>(&other);
  return o != nullptr && o->load_format_ == load_format_;
}

std::string SglangOptions::Describe() const {
  return absl::StrCat("load_format=", BucketFormatName(load_format_));
}

}  // namespace wsync
