#include "daemon/relay/relay_subscribers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace wsync {

absl::StatusOr<std::string> RelaySubscribers::Add(RelaySubscription subscription,
                                                  std::string caller) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [n, held] : subscribers_) {
    if (held.subscription.node != subscription.node) continue;
    for (const std::string& group : subscription.groups) {
      const auto& theirs = held.subscription.groups;
      if (std::find(theirs.begin(), theirs.end(), group) != theirs.end()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "node ", subscription.node, " already holds subscription ", held.id, " to group '",
            group, "' (", held.caller, "); a new one is admitted once that stream has ended"));
      }
    }
  }
  const uint64_t n = next_++;
  Subscriber s{absl::StrCat("s", n), std::move(subscription), std::move(caller), absl::Now(),
               nullptr};
  std::string id = s.id;
  subscribers_.emplace(n, std::move(s));
  return id;
}

void RelaySubscribers::Attach(const std::string& id, std::shared_ptr<RelayChannel> channel) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [n, s] : subscribers_) {
    if (s.id == id) s.channel = std::move(channel);
  }
}

std::shared_ptr<RelayChannel> RelaySubscribers::Channel(const std::string& group,
                                                        const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [n, s] : subscribers_) {
    if (s.subscription.node != node || s.channel == nullptr) continue;
    const auto& groups = s.subscription.groups;
    if (std::find(groups.begin(), groups.end(), group) != groups.end()) return s.channel;
  }
  return nullptr;
}

void RelaySubscribers::Remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = subscribers_.begin(); it != subscribers_.end(); ++it) {
    if (it->second.id == id) {
      subscribers_.erase(it);
      return;
    }
  }
}

std::vector<RelaySubscribers::Subscriber> RelaySubscribers::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Subscriber> out;
  for (const auto& [n, s] : subscribers_) out.push_back(s);
  return out;
}

std::vector<RelaySubscribers::Subscriber> RelaySubscribers::OfGroup(
    const std::string& group) const {
  std::vector<Subscriber> out;
  for (Subscriber& s : List()) {
    const auto& groups = s.subscription.groups;
    if (std::find(groups.begin(), groups.end(), group) != groups.end()) out.push_back(std::move(s));
  }
  return out;
}

namespace {
std::mutex process_mu;
std::shared_ptr<RelaySubscribers>& ProcessSubscribersLocked() {
  static auto* subscribers = new std::shared_ptr<RelaySubscribers>();
  return *subscribers;
}
}  // namespace

void SetProcessRelaySubscribers(std::shared_ptr<RelaySubscribers> subscribers) {
  std::lock_guard<std::mutex> lock(process_mu);
  ProcessSubscribersLocked() = std::move(subscribers);
}

std::shared_ptr<RelaySubscribers> ProcessRelaySubscribers() {
  std::lock_guard<std::mutex> lock(process_mu);
  return ProcessSubscribersLocked();
}

}  // namespace wsync
