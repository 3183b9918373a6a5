#include "daemon/core/session_registry.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace wsync {

std::string SessionRegistry::NewId() {
  std::lock_guard<std::mutex> lock(mu_);
  std::random_device rd;
  return absl::StrFormat("s%llu-%06x", static_cast<unsigned long long>(next_++), rd() & 0xffffff);
}

std::string SessionRegistry::NewSourceTag() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

void SessionRegistry::Add(const std::string& id, std::string source_tag, int device,
                          std::string client_name, std::vector<SlotMemory*> slots) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[id] = Session{
      id,   std::move(source_tag), device, std::move(client_name), std::move(slots), absl::Now(),
      false};
}

absl::StatusOr<Session> SessionRegistry::Touch(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown session '", id, "' (closed, expired, or opened on another daemon)"));
  }
  it->second.last_seen = absl::Now();
  return it->second;
}

absl::StatusOr<Session> SessionRegistry::Remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("unknown session '", id, "'"));
  if (it->second.update_running) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", id, "' has an update running; finish or abort it first"));
  }
  Session s = std::move(it->second);
  sessions_.erase(it);
  return s;
}

absl::Status SessionRegistry::StartUpdate(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("unknown session '", id, "'"));
  if (it->second.update_running) {
    return absl::FailedPreconditionError(absl::StrCat("session '", id, "' already runs an update"));
  }
  it->second.update_running = true;
  it->second.last_seen = absl::Now();
  return absl::OkStatus();
}

void SessionRegistry::EndUpdate(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  it->second.update_running = false;
  it->second.last_seen = absl::Now();
}

std::vector<Session> SessionRegistry::Expire(absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Session> expired;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (!it->second.update_running && now - it->second.last_seen > lease_) {
      expired.push_back(std::move(it->second));
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

std::vector<Session> SessionRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Session> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

}  // namespace wsync
