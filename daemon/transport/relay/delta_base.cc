#include "daemon/transport/relay/delta_base.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace wsync {

void DeltaBase::Begin(const std::string& version, const std::vector<std::string>& held) {
  std::lock_guard<std::mutex> lock(mu_);
  // The members' word decides: the staged version where every member holding one holds it.
  std::set<std::string> versions;
  for (const std::string& v : held) {
    if (!v.empty()) versions.insert(v);
  }
  const std::string staged = staged_.name.empty() ? "" : staged_.print.Of(staged_.name);
  const bool staged_landed =
      !staged.empty() && !staged_.failed && versions.size() == 1 && *versions.begin() == staged;
  // What is dropped becomes the spare the next version is staged into.
  spare_.clear();
  const auto drop = [this](Version& v) {
    spare_.merge(v.tensors);
    v = Version{};
  };
  if (staged_landed) {
    drop(base_);
    base_ = std::move(staged_);
    base_.name = staged;
  } else if (!staged_.name.empty()) {
    if (staged_.failed) {
      why_none_ = absl::StrCat("version '", staged_.name, "' did not fit the delta base's cap of ",
                               cap_bytes_, " bytes");
      drop(base_);
    }
    // Otherwise the members did not all take it: the previous base stays theirs.
  }
  if (!base_.name.empty() && versions.count(base_.name) == 0) {
    why_none_ = absl::StrCat("no member holds version '", base_.name, "'");
    drop(base_);
  }
  drop(staged_);
  staged_.name = version;
}

std::string DeltaBase::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_.name;
}

std::string DeltaBase::why_none() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_.name.empty() ? why_none_ : "";
}

bool DeltaBase::Assemble(const BucketManifest& manifest, absl::Span<uint8_t> out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (base_.name.empty()) return false;
  for (const TensorEntry& t : manifest.tensors) {
    auto it = base_.tensors.find(t.name);
    if (it == base_.tensors.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
        it->second.bytes.size() != t.length || t.end() > out.size()) {
      return false;
    }
    std::memcpy(out.data() + t.offset, it->second.bytes.data(), t.length);
  }
  return true;
}

void DeltaBase::Stage(uint64_t index, const BucketManifest& manifest, uint32_t crc32,
                      absl::Span<const uint8_t> span) {
  std::lock_guard<std::mutex> lock(mu_);
  if (staged_.name.empty() || staged_.failed) return;
  staged_.print.Add(index, manifest, crc32);
  for (const TensorEntry& t : manifest.tensors) {
    if (t.end() > span.size() || base_.bytes + staged_.bytes + t.length > cap_bytes_) {
      staged_.failed = true;
      staged_.tensors.clear();
      staged_.bytes = 0;
      return;
    }
    auto [at, fresh] = staged_.tensors.try_emplace(t.name);
    Tensor& kept = at->second;
    if (fresh && !spare_.empty()) {
      if (auto spare = spare_.find(t.name); spare != spare_.end()) {
        kept.bytes = std::move(spare->second.bytes);
        kept.bytes.clear();
        spare_.erase(spare);
      } else {
        // Another model's names: its memory would sit beside the base and the staged version,
        // outside the cap, for the whole update. Freed now.
        spare_.clear();
      }
    }
    staged_.bytes -= kept.bytes.size();
    kept.dtype = t.dtype;
    kept.shape = t.shape;
    kept.bytes.assign(span.data() + t.offset, span.data() + t.end());
    staged_.bytes += t.length;
  }
}

uint64_t DeltaBase::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_.bytes + staged_.bytes;
}

}  // namespace wsync
