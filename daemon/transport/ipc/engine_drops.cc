#include "daemon/transport/ipc/engine_drops.h"

namespace wsync {

absl::Status EngineDrops::WhyDropped(size_t engine) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = dropped_.find(engine);
  return it == dropped_.end() ? absl::OkStatus() : it->second;
}

bool EngineDrops::TryDrop(const std::map<size_t, absl::Status>& failed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (needed_ == 0) return false;
  size_t fresh = 0;
  for (const auto& [engine, why] : failed) fresh += dropped_.count(engine) == 0 ? 1 : 0;
  if (engines_ < dropped_.size() + fresh + needed_) return false;
  for (const auto& [engine, why] : failed) dropped_.emplace(engine, why);
  return true;
}

std::map<size_t, absl::Status> EngineDrops::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace wsync
