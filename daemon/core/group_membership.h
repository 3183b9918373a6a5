#ifndef WSYNC_DAEMON_CORE_GROUP_MEMBERSHIP_H_
#define WSYNC_DAEMON_CORE_GROUP_MEMBERSHIP_H_

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace wsync {

// Which of a group's engines its transport is formed over, and, for a quorum group (one whose
// updates need fewer than all of its engines), which it goes on without, why, and when each is
// tried again. Engines are indexes into the group's spec order; their URLs name them in texts.
// Not thread-safe: the group's lock guards it.
class GroupMembership {
 public:
  // An engine that answers its probe but fails to join or to pause is not tried again before its
  // back-off has passed: kFirstRetry, doubling each time up to kLongestRetry.
  static constexpr absl::Duration kFirstRetry = absl::Seconds(30);
  static constexpr absl::Duration kLongestRetry = absl::Minutes(10);

  // `needed`: how many engines an update needs (0: all of them).
  GroupMembership(std::string group, std::vector<std::string> urls, size_t needed);

  size_t size() const { return urls_.size(); }
  size_t needed() const { return needed_; }
  bool quorum() const { return needed_ < urls_.size(); }
  const std::string& url(size_t i) const { return urls_[i]; }
  // Every engine's index, in spec order.
  std::vector<size_t> All() const;

  // The engines the transport is formed over, in rank order.
  const std::vector<size_t>& members() const { return members_; }
  void set_members(std::vector<size_t> members) { members_ = std::move(members); }
  bool IsMember(size_t i) const;

  // Leaves engine i out of the open update (or, between updates, the last formation), saying why;
  // `back_off`: it answered its probe but failed to join or to pause (see kFirstRetry).
  void SetAside(size_t i, const absl::Status& why, bool back_off = false);
  // Why engine i is left out; null when it is not.
  const absl::Status* SetAsideWhy(size_t i) const;
  const std::map<std::string, absl::Status>& set_aside() const { return set_aside_; }
  void ClearSetAside() { set_aside_.clear(); }
  // Engines the transport dropped mid-update (URL -> why), left out of the rest of it.
  void NoteDropped(const std::map<std::string, absl::Status>& dropped) {
    for (const auto& [url, why] : dropped) set_aside_.emplace(url, why);
  }
  bool BackingOff(size_t i, absl::Time now) const;
  // The engines to form with: all but those backing off (set aside, each named with when it is
  // tried again), unless that leaves too few.
  std::vector<size_t> Retryable();
  // Sets aside, naming when they are tried again, the engines backing off.
  void NoteBackingOff(absl::Time now);
  // UNAVAILABLE: `left` engines are too few, each left-out one named with why.
  absl::Status TooFew(size_t left) const;
  // A formation succeeded over members(): they are no longer left out nor backing off.
  void Formed();

  // The background check of the engines outside the formation: those to ask now (not members,
  // not backing off), forgetting what was heard of engines that are members again.
  std::vector<size_t> ToWatch(absl::Time now);
  // What the background check heard from engine i: OK when it answered healthy.
  void Heard(size_t i, const absl::Status& health);
  // The engines outside the formation whose last background check answered healthy (URLs).
  std::set<std::string> AnsweringAgain() const;
  // At an update's start: the engines outside the formation that answered again (taken back:
  // the update forms the group with them); the others are set aside with what was last heard.
  std::vector<size_t> TakeBack(absl::Time now);

 private:
  struct Retry {
    absl::Time at;
    absl::Duration backoff;
  };
  const std::string group_;
  const std::vector<std::string> urls_;
  const size_t needed_;
  std::vector<size_t> members_;
  // Engine URL -> why it is left out.
  std::map<std::string, absl::Status> set_aside_;
  // Engine URL -> when it may be tried again, after it failed to join or to pause.
  std::map<std::string, Retry> retry_;
  // Engine URL -> what the background check last heard from an engine outside the formation.
  std::map<std::string, absl::Status> left_out_health_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_GROUP_MEMBERSHIP_H_
