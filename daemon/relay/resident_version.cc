#include "daemon/relay/resident_version.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace wsync {

absl::StatusOr<std::optional<ResidentMedium>> ParseResidentMedium(const std::string& text) {
  if (text == "none") return std::optional<ResidentMedium>();
  if (text == "host") return std::optional<ResidentMedium>(ResidentMedium::kHost);
  if (text == "gpu") return std::optional<ResidentMedium>(ResidentMedium::kGpu);
  return absl::InvalidArgumentError(
      absl::StrCat("resident must be none, host or gpu, not '", text, "'"));
}

ResidentVersion::ResidentVersion(Platform* platform, int device, ResidentMedium medium,
                                 uint64_t cap_bytes)
    : platform_(platform), device_(device), medium_(medium), cap_bytes_(cap_bytes) {}

void ResidentVersion::Begin(const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  staged_ = std::make_unique<Kept>();
  staged_->version = version;
  staging_failed_ = false;
}

absl::Status ResidentVersion::Keep(const BucketManifest& manifest, uint32_t checksum, bool last,
                                   SlotMemory& slot) {
  const uint64_t span = manifest.span_bytes();
  std::unique_lock<std::mutex> lock(mu_);
  if (staged_ == nullptr || staging_failed_) return absl::OkStatus();
  const uint64_t held = current_ != nullptr ? current_->bytes : 0;
  if (held > 0 && held + staged_->bytes + span > cap_bytes_) {
    WSYNC_LOG(Info, "resident: dropping version '", current_->version, "' (", held,
              " bytes) to make room for version '", staged_->version, "' under the cap of ",
              cap_bytes_, " bytes");
    current_.reset();
  }
  if (staged_->bytes + span > cap_bytes_) {
    staging_failed_ = true;
    why_none_ =
        absl::StrCat("version '", staged_->version, "' does not fit the resident cap: its ",
                     staged_->buckets.size() + 1, " buckets so far take ", staged_->bytes + span,
                     " bytes, the cap (--resident-bytes) is ", cap_bytes_);
    staged_->buckets.clear();
    WSYNC_LOG(Warning, "resident: ", why_none_);
    return absl::ResourceExhaustedError(why_none_);
  }
  const std::string version = staged_->version;
  lock.unlock();
  // The copy runs unlocked: Status() and Current() must not wait on it.
  absl::StatusOr<std::unique_ptr<ResidentMemory>> memory =
      platform_->AllocateResident(device_, medium_, span);
  absl::Status copied = memory.ok() ? (*memory)->CopyFromSlot(slot) : memory.status();
  lock.lock();
  if (staged_ == nullptr || staged_->version != version || staging_failed_) {
    return absl::OkStatus();
  }
  if (!copied.ok()) {
    staging_failed_ = true;
    why_none_ = absl::StrCat("version '", version, "' is not kept: ", copied.message());
    staged_->buckets.clear();
    WSYNC_LOG(Warning, "resident: ", why_none_);
    return copied;
  }
  staged_->buckets.push_back(Bucket{manifest, checksum, last, *std::move(memory)});
  staged_->bytes += span;
  return absl::OkStatus();
}

void ResidentVersion::Commit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (staged_ == nullptr) return;
  if (staging_failed_ || staged_->buckets.empty()) {
    // The previous version is no longer the last one received: an engine brought to it would
    // go back in time.
    if (!staging_failed_) {
      why_none_ = absl::StrCat("version '", staged_->version, "' had no bucket to keep");
    }
    current_.reset();
  } else {
    staged_->since = absl::Now();
    WSYNC_LOG(Info, "resident: version '", staged_->version, "' kept: ", staged_->buckets.size(),
              " buckets, ", staged_->bytes, " bytes in ", ResidentMediumName(medium_), " memory");
    current_ = std::shared_ptr<const Kept>(std::move(staged_));
    why_none_.clear();
  }
  staged_.reset();
  staging_failed_ = false;
}

void ResidentVersion::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  staged_.reset();
  staging_failed_ = false;
}

void ResidentVersion::Withdraw(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ == nullptr) return;
  why_none_ = absl::StrCat("version '", current_->version, "' was withdrawn: ", why);
  WSYNC_LOG(Warning, "resident: ", why_none_);
  current_.reset();
}

std::shared_ptr<const ResidentVersion::Kept> ResidentVersion::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

ResidentVersion::View ResidentVersion::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  View v;
  v.medium = medium_;
  v.cap_bytes = cap_bytes_;
  if (current_ != nullptr) {
    v.version = current_->version;
    v.bytes = current_->bytes;
    v.buckets = current_->buckets.size();
  }
  if (staged_ != nullptr) v.bytes += staged_->bytes;
  v.why_none = why_none_;
  return v;
}

}  // namespace wsync
