#include "daemon/core/engine_adapter.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/fan_out.h"

namespace wsync {
absl::Status EngineAdapter::UseDataPath(absl::string_view data_path) {
  DataPathBinding* binding = Binding(data_path);
  if (binding == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", endpoint().url, " cannot receive over the ", data_path, " data path"));
  }
  used_ = binding;
  return absl::OkStatus();
}

std::vector<absl::Status> OnEachEngine(const std::vector<EngineAdapter*>& adapters,
                                       const std::function<absl::Status(EngineAdapter&)>& fn) {
  return FanOut(adapters.size(), [&](size_t i) { return fn(*adapters[i]); });
}

absl::Status FirstError(const std::vector<absl::Status>& results) {
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace wsync
