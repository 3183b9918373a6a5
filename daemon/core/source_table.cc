#include "daemon/core/source_table.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/peer_text.h"

namespace wsync {

absl::StatusOr<PulledSources> SourceTable::Resolve(const std::vector<AllocationAnnounce>& announced,
                                                   const std::vector<TensorSourceRef>& sources,
                                                   const BucketManifest& manifest) {
  if (sources.size() != manifest.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("pull bucket names ", sources.size(),
                                                   " sources for ", manifest.tensors.size(),
                                                   " tensors"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const AllocationAnnounce& a : announced) {
    auto it = entries_.find(a.id);
    if (it != entries_.end() && it->second.handle == a.handle && it->second.bytes == a.bytes) {
      continue;
    }
    auto memory = platform_->MapSource(device_, a.handle, a.bytes, session_tag_);
    if (!memory.ok() && memory.status().code() == absl::StatusCode::kPermissionDenied) {
      return absl::PermissionDeniedError(
          absl::StrCat("trainer allocation ", a.id, " (", a.bytes,
                       " bytes) refused: ", memory.status().message()));
    }
    if (!memory.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer allocation ", a.id, " (", a.bytes,
                       " bytes) cannot be mapped: ", memory.status().message()));
    }
    entries_[a.id] = Entry{a.handle, a.bytes, std::shared_ptr<SourceMemory>(std::move(*memory))};
  }
  PulledSources out;
  for (size_t i = 0; i < sources.size(); ++i) {
    const TensorEntry& t = manifest.tensors[i];
    auto it = entries_.find(sources[i].allocation);
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", SanitizePeerText(t.name, kQuotedNameBytes), "' names trainer allocation ",
          sources[i].allocation, ", which was never announced"));
    }
    const uint64_t offset = sources[i].offset;
    if (offset > it->second.bytes || t.length > it->second.bytes - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", SanitizePeerText(t.name, kQuotedNameBytes), "' (", t.length,
                       " bytes at ", offset, ") runs past allocation ", sources[i].allocation,
                       " of ", it->second.bytes, " bytes"));
    }
    out.pieces.push_back(SourcePiece{static_cast<const char*>(it->second.memory->data()) + offset,
                                     t.offset, t.length, it->second.memory.get()});
    if (out.keep.empty() || out.keep.back() != it->second.memory) {
      out.keep.push_back(it->second.memory);
    }
  }
  return out;
}

size_t SourceTable::mapped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace wsync
