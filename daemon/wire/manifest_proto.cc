#include "daemon/wire/manifest_proto.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/peer_text.h"

namespace wsync {

absl::StatusOr<BucketManifest> ManifestFromTensorSpecs(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& tensors) {
  BucketManifest m;
  m.tensors.reserve(tensors.size());
  // Names and shapes are quoted in refusals, kept and logged: bounded before anything reads them.
  for (int i = 0; i < tensors.size(); ++i) {
    const v1::TensorSpec& t = tensors[i];
    absl::Status name =
        CheckPeerLabel(absl::StrCat("the name of tensor ", i), t.name(), kMaxTensorNameBytes);
    if (!name.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name.message(), " (", SanitizePeerText(t.name(), kQuotedNameBytes), ")"));
    }
    if (t.shape_size() > static_cast<int>(kMaxTensorDims)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name(), "' has ", t.shape_size(),
                                                     " dimensions; at most ", kMaxTensorDims,
                                                     " are allowed"));
    }
  }
  for (const v1::TensorSpec& t : tensors) {
    auto dtype = ParseDType(t.dtype());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", SanitizePeerText(t.name(), kQuotedNameBytes), "': ",
                       // It quotes the peer's dtype text.
                       SanitizePeerText(dtype.status().message(), kQuotedNameBytes)));
    }
    m.tensors.push_back(TensorEntry{t.name(), *dtype,
                                    std::vector<int64_t>(t.shape().begin(), t.shape().end()),
                                    t.offset(), t.length()});
  }
  return m;
}

void ManifestToTensorSpecs(const BucketManifest& manifest,
                           google::protobuf::RepeatedPtrField<v1::TensorSpec>* out) {
  out->Reserve(static_cast<int>(manifest.tensors.size()));
  for (const TensorEntry& t : manifest.tensors) {
    v1::TensorSpec* spec = out->Add();
    spec->set_name(t.name);
    spec->set_dtype(std::string(DTypeName(t.dtype)));
    for (int64_t d : t.shape) spec->add_shape(d);
    spec->set_offset(t.offset);
    spec->set_length(t.length);
  }
}

}  // namespace wsync
