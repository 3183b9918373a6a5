#include "daemon/core/weights_check.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checksum.h"

namespace wsync {
namespace {

// One CRC-32 over the sorted (key, value) pairs: equal maps, equal fingerprints.
std::string Fingerprint(const WeightChecksums& checksums) {
  uint32_t crc = 0;
  for (const auto& [key, value] : checksums) {
    crc = Crc32(key.data(), key.size() + 1, crc);  // with its terminating NUL, as a separator
    crc = Crc32(value.data(), value.size() + 1, crc);
  }
  return Crc32Hex(crc);
}

// The keys whose values differ between `a` and `b`, or that only one has.
std::vector<std::string> DifferingKeys(const WeightChecksums& a, const WeightChecksums& b) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end() || it->second != value) keys.push_back(key);
  }
  for (const auto& [key, value] : b) {
    if (a.count(key) == 0) keys.push_back(key);
  }
  return keys;
}

}  // namespace

WeightsCheck CompareEngineWeights(const std::vector<EngineEndpoint>& engines,
                                  const std::vector<absl::StatusOr<WeightChecksums>>& checksums) {
  WeightsCheck check;
  check.notes.resize(engines.size());
  check.differs.assign(engines.size(), false);
  // TP size -> fingerprint -> engines with it.
  std::map<uint32_t, std::map<std::string, std::vector<size_t>>> sizes;
  std::vector<std::string> prints(engines.size());
  for (size_t i = 0; i < engines.size(); ++i) {
    if (!checksums[i].ok()) {
      check.notes[i] = absl::StrCat("not checked: ", checksums[i].status().message());
      continue;
    }
    if (checksums[i]->empty()) {
      // Equal to every other empty answer, and proof of nothing.
      check.notes[i] = "not checked: the checker listed no tensors";
      continue;
    }
    prints[i] = Fingerprint(*checksums[i]);
    sizes[engines[i].ranks][prints[i]].push_back(i);
  }
  std::vector<std::string> errors;
  for (const auto& [ranks, by_print] : sizes) {
    size_t members = 0, largest = 0, largest_sets = 0;
    const std::vector<size_t>* majority = nullptr;
    for (const auto& [print, indices] : by_print) {
      members += indices.size();
      if (indices.size() > largest) {
        largest = indices.size();
        largest_sets = 1;
        majority = &indices;
      } else if (indices.size() == largest) {
        ++largest_sets;
      }
    }
    if (largest_sets > 1) majority = nullptr;
    for (const auto& [print, indices] : by_print) {
      for (size_t i : indices) {
        const std::string head =
            absl::StrCat("checksum ", print, " over ", checksums[i]->size(), " tensor(s)");
        if (members == 1) {
          check.notes[i] = absl::StrCat(head, "; no other engine of TP ", ranks, " to compare");
          continue;
        }
        if (by_print.size() == 1) {
          check.notes[i] = absl::StrCat(head, ", equal on all ", members, " engines of TP ", ranks);
          continue;
        }
        if (majority == &indices) {
          check.notes[i] = absl::StrCat(head, ", equal on ", indices.size(), " of ", members,
                                        " engines of TP ", ranks);
          continue;
        }
        // Compared with the majority's first engine, or with any other engine when there is no
        // majority.
        size_t other = majority != nullptr ? majority->front() : engines.size();
        if (other == engines.size()) {
          for (const auto& [p, others] : by_print) {
            if (p != print) {
              other = others.front();
              break;
            }
          }
        }
        const std::vector<std::string> keys = DifferingKeys(*checksums[i], *checksums[other]);
        std::vector<std::string> shown(keys.begin(),
                                       keys.begin() + std::min<size_t>(3, keys.size()));
        check.differs[i] = true;
        check.notes[i] = absl::StrCat(head, ", differs from ", engines[other].url, " in ",
                                      keys.size(), " tensor(s): ", absl::StrJoin(shown, ", "),
                                      keys.size() > shown.size() ? ", ..." : "");
        errors.push_back(absl::StrCat("engine ", engines[i].url, " ", check.notes[i]));
      }
    }
  }
  check.error = absl::StrJoin(errors, "; ");
  return check;
}

}  // namespace wsync
