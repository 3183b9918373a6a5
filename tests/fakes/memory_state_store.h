#ifndef WSYNC_TESTS_FAKES_MEMORY_STATE_STORE_H_
#define WSYNC_TESTS_FAKES_MEMORY_STATE_STORE_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/group_record.h"

namespace wsync {

// Group records in memory. Records live in a shared map, so a test can hand a second DaemonCore
// (the wsyncd that starts after one died) what the first one left.
class MemoryStateStore final : public GroupStateStore {
 public:
  using Records = std::map<std::string, GroupRecord>;
  explicit MemoryStateStore(std::shared_ptr<Records> records = std::make_shared<Records>())
      : records_(std::move(records)) {}

  absl::Status Save(const GroupRecord& record) override {
    std::function<void(const GroupRecord&)> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fail_.ok()) return fail_;
      hook = on_save_;
    }
    // Called before the record counts as written, as the engines' state is at that moment.
    if (hook) hook(record);
    std::lock_guard<std::mutex> lock(mu_);
    (*records_)[record.spec.name] = record;
    return absl::OkStatus();
  }
  absl::Status Remove(const std::string& group) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_->erase(group);
    return absl::OkStatus();
  }

  std::optional<GroupRecord> Get(const std::string& group) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_->find(group);
    if (it == records_->end()) return std::nullopt;
    return it->second;
  }
  // What a wsyncd that died now would leave behind.
  std::vector<GroupRecord> Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<GroupRecord> out;
    for (const auto& [name, r] : *records_) out.push_back(r);
    return out;
  }
  void OnSave(std::function<void(const GroupRecord&)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    on_save_ = std::move(hook);
  }
  // Every later Save fails with `status` (a full disk, say).
  void FailSaves(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = std::move(status);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Records> records_;
  std::function<void(const GroupRecord&)> on_save_;
  absl::Status fail_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_FAKES_MEMORY_STATE_STORE_H_
