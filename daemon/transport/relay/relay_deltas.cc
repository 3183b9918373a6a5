#include "daemon/transport/relay/relay_deltas.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/delta/bucket_delta.h"
#include "common/log.h"

namespace wsync {

void RelayDeltas::Begin(const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = version;
  settled_ = false;
  why_dense_.clear();
  dense_bytes_ = sent_bytes_ = elements_ = changed_ = 0;
}

RelayDeltas::Frame RelayDeltas::Encode(const BucketSource& source, const BucketManifest& manifest,
                                       uint64_t span, uint64_t index, uint32_t crc32,
                                       const std::vector<std::string>& held) {
  if (!enabled_) return {};
  std::lock_guard<std::mutex> lock(mu_);
  const auto dense = [&](std::string why) {
    if (why_dense_.empty()) {
      why_dense_ = std::move(why);
      WSYNC_LOG(Info, "relay: version '", version_, "' goes dense: ", why_dense_);
    }
    return Frame{};
  };
  if (source.base != nullptr) return dense("its buckets are read in place, not from a slot");
  if (source.slot->kind() != MemoryKind::kHostShm) {
    return dense("its buckets are on a GPU, and deltas are encoded on the CPU only so far");
  }
  if (!settled_) {
    base_.Begin(version_, held);
    settled_ = true;
  }
  const absl::Span<const uint8_t> next(static_cast<const uint8_t*>(source.slot->data()), span);
  base_.Stage(index, manifest, crc32, next);
  const std::string base = base_.version();
  if (base.empty()) return dense(base_.why_none());
  bool wanted = false;
  for (const std::string& h : held) wanted = wanted || h == base;
  if (!wanted) return dense(absl::StrCat("no member holds the base, version '", base, "'"));
  if (!DeltaCoversSpan(manifest)) return Frame{};  // bytes between tensors: dense
  scratch_.resize(span);
  // A tensor new since the base, or changed in dtype or shape: this bucket goes dense.
  if (!base_.Assemble(manifest, absl::MakeSpan(scratch_))) return Frame{};
  DeltaStats stats;
  // A frame that could not be smaller than the span is not written: dense.
  absl::StatusOr<std::string> frame = EncodeBucketDelta(manifest, scratch_, next, &stats, span);
  Frame compared;
  if (frame.ok() || absl::IsResourceExhausted(frame.status())) {
    elements_ += stats.elements;
    changed_ += stats.changed_elements;
    compared.elements_compared = stats.elements;
    compared.elements_changed = stats.changed_elements;
  }
  if (absl::IsResourceExhausted(frame.status())) return compared;
  if (!frame.ok()) return dense(std::string(frame.status().message()));
  if (frame->size() >= span) return compared;  // nothing to gain: dense
  std::unique_ptr<SlotMemory>& staging = staging_[source.slot];
  if (staging == nullptr || staging->bytes() < frame->size()) {
    absl::StatusOr<std::unique_ptr<SlotMemory>> made =
        platform_->AllocateSlot(source.device, source.slot->bytes());
    if (!made.ok()) return dense(absl::StrCat("no staging slot: ", made.status().message()));
    staging = *std::move(made);
  }
  std::memcpy(staging->data(), frame->data(), frame->size());
  compared.base = base;
  compared.slot = staging.get();
  compared.bytes = frame->size();
  return compared;
}

void RelayDeltas::Count(uint64_t dense_bytes, uint64_t sent_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  dense_bytes_ += dense_bytes;
  sent_bytes_ += sent_bytes;
}

std::string RelayDeltas::Summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_ || dense_bytes_ == 0) return "";
  return absl::StrFormat(
      "version '%s' sent %d of %d dense bytes (%.2f%%)%s", version_, sent_bytes_, dense_bytes_,
      100.0 * static_cast<double>(sent_bytes_) / static_cast<double>(dense_bytes_),
      elements_ == 0 ? ""
                     : absl::StrFormat(
                           ", %.3f%% of the elements compared changed",
                           100.0 * static_cast<double>(changed_) / static_cast<double>(elements_)));
}

}  // namespace wsync
