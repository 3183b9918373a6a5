#include "daemon/service/session_owners.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace wsync {

void SessionOwners::Record(const std::string& session_id, const Caller& opener,
                           const std::function<std::vector<std::string>()>& open_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> open = open_ids();
  for (auto it = owners_.begin(); it != owners_.end();) {
    const bool alive = std::find(open.begin(), open.end(), it->first) != open.end();
    it = alive ? std::next(it) : owners_.erase(it);
  }
  owners_[session_id] = opener.connection;
}

absl::Status SessionOwners::Check(const std::string& session_id, const Caller& caller,
                                  bool admin_may) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = owners_.find(session_id);
  if (it == owners_.end() || it->second == caller.connection) return absl::OkStatus();
  if (admin_may && caller.role == Role::kAdmin) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("session ", session_id, " belongs to another connection; ", caller.description,
                   " may not use it", admin_may ? " (an admin may close it)" : ""));
}

void SessionOwners::Forget(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  owners_.erase(session_id);
}

}  // namespace wsync
