#include "daemon/core/group_membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace wsync {

GroupMembership::GroupMembership(std::string group, std::vector<std::string> urls, size_t needed)
    : group_(std::move(group)),
      urls_(std::move(urls)),
      needed_(needed == 0 || needed > urls_.size() ? urls_.size() : needed) {}

std::vector<size_t> GroupMembership::All() const {
  std::vector<size_t> all(urls_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

bool GroupMembership::IsMember(size_t i) const {
  return std::find(members_.begin(), members_.end(), i) != members_.end();
}

void GroupMembership::SetAside(size_t i, const absl::Status& why, bool back_off) {
  const std::string& url = urls_[i];
  WSYNC_LOG(Warning, "group ", group_, ": going on without engine ", url, " (quorum ", needed_,
            " of ", urls_.size(), "): ", why.message());
  set_aside_[url] = why;
  // What is known of it until the background check hears from it.
  left_out_health_[url] = why;
  if (!back_off) return;
  // An engine that answers its probe but fails to join or to pause would otherwise make every
  // update form the group again (on a broadcast: a new NCCL group, and a wait for its join).
  Retry& retry = retry_[url];
  retry.backoff = retry.backoff == absl::ZeroDuration()
                      ? kFirstRetry
                      : std::min(retry.backoff * 2, kLongestRetry);
  retry.at = absl::Now() + retry.backoff;
}

const absl::Status* GroupMembership::SetAsideWhy(size_t i) const {
  auto it = set_aside_.find(urls_[i]);
  return it == set_aside_.end() ? nullptr : &it->second;
}

bool GroupMembership::BackingOff(size_t i, absl::Time now) const {
  auto it = retry_.find(urls_[i]);
  return it != retry_.end() && it->second.at > now;
}

std::vector<size_t> GroupMembership::Retryable() {
  const absl::Time now = absl::Now();
  std::vector<size_t> retryable;
  for (size_t i = 0; i < urls_.size(); ++i) {
    if (!BackingOff(i, now)) retryable.push_back(i);
  }
  if (retryable.size() < needed_) return All();
  NoteBackingOff(now);
  return retryable;
}

void GroupMembership::NoteBackingOff(absl::Time now) {
  for (size_t i = 0; i < urls_.size(); ++i) {
    if (!BackingOff(i, now)) continue;
    const Retry& retry = retry_.at(urls_[i]);
    set_aside_[urls_[i]] = absl::UnavailableError(
        absl::StrCat("it failed to join or to pause; tried again in ",
                     absl::FormatDuration(absl::Trunc(retry.at - now, absl::Seconds(1)))));
  }
}

absl::Status GroupMembership::TooFew(size_t left) const {
  std::vector<std::string> why;
  for (const auto& [url, status] : set_aside_) {
    why.push_back(absl::StrCat(url, ": ", status.message()));
  }
  return absl::UnavailableError(absl::StrCat("group '", group_, "' needs ", needed_, " of its ",
                                             urls_.size(), " engines and ", left,
                                             " are left; without ", absl::StrJoin(why, "; ")));
}

void GroupMembership::Formed() {
  for (size_t i : members_) {
    set_aside_.erase(urls_[i]);
    retry_.erase(urls_[i]);
  }
}

std::vector<size_t> GroupMembership::ToWatch(absl::Time now) {
  std::vector<size_t> outside;
  for (size_t i = 0; i < urls_.size(); ++i) {
    if (!IsMember(i) && !BackingOff(i, now)) outside.push_back(i);
  }
  // An engine that became a member again is no longer watched.
  std::erase_if(left_out_health_, [&](const auto& entry) {
    return std::none_of(outside.begin(), outside.end(),
                        [&](size_t i) { return urls_[i] == entry.first; });
  });
  return outside;
}

void GroupMembership::Heard(size_t i, const absl::Status& health) {
  const std::string& url = urls_[i];
  const auto before = left_out_health_.find(url);
  if (health.ok() && (before == left_out_health_.end() || !before->second.ok())) {
    WSYNC_LOG(Info, "group ", group_, ": engine ", url,
              " answers again; the next update forms the group with it");
  }
  left_out_health_[url] = health;
}

std::set<std::string> GroupMembership::AnsweringAgain() const {
  std::set<std::string> out;
  for (const auto& [url, heard] : left_out_health_) {
    if (heard.ok()) out.insert(url);
  }
  return out;
}

std::vector<size_t> GroupMembership::TakeBack(absl::Time now) {
  // No engine is asked anything here: an engine that is down must not cost the update its
  // control timeout. One that failed to join or to pause is tried only once its back-off passed.
  std::vector<size_t> coming_back, still_out;
  for (size_t i = 0; i < urls_.size(); ++i) {
    if (IsMember(i) || BackingOff(i, now)) continue;
    auto heard = left_out_health_.find(urls_[i]);
    if (heard != left_out_health_.end() && heard->second.ok()) {
      coming_back.push_back(i);
      left_out_health_.erase(heard);
    } else {
      still_out.push_back(i);
    }
  }
  for (size_t i : still_out) {
    auto heard = left_out_health_.find(urls_[i]);
    SetAside(i, heard != left_out_health_.end()
                    ? heard->second
                    : absl::UnavailableError("not heard from since it was left out"));
  }
  NoteBackingOff(now);
  return coming_back;
}

}  // namespace wsync
