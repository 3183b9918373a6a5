#include "daemon/core/update_history.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/peer_text.h"

namespace wsync {

UpdateRecord BoundedRecord(UpdateRecord record) {
  if (!record.status.ok()) {
    record.status = absl::Status(record.status.code(),
                                 SanitizePeerText(record.status.message(), kMaxRecordTextBytes));
  }
  if (record.engine_results.size() > kMaxRecordEngines) {
    const size_t more = record.engine_results.size() - kMaxRecordEngines;
    record.engine_results.resize(kMaxRecordEngines);
    record.engine_results.push_back(absl::StrCat("... and ", more, " more engine(s)"));
  }
  for (std::string& e : record.engine_results) e = SanitizePeerText(e, kMaxRecordTextBytes);
  if (record.committed_engines.size() > kMaxRecordEngines) {
    record.committed_engines.resize(kMaxRecordEngines);
  }
  for (std::string& e : record.committed_engines) e = SanitizePeerText(e, kMaxRecordTextBytes);
  return record;
}

void UpdateHistory::Upsert(const UpdateRecord& given) {
  const UpdateRecord record = BoundedRecord(given);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (it->update_id == record.update_id) {
      const bool was_running = it->state == "running";
      *it = record;
      if (was_running && record.state != "running") {
        if (record.state == "committed") {
          ++committed_;
          last_committed_at_ = record.started + absl::Seconds(record.seconds);
        } else
          ++failed_;
        bytes_sent_ += record.bytes;
      }
      return;
    }
  }
  records_.push_back(record);
  if (record.state == "committed")
    ++committed_;
  else if (record.state != "running")
    ++failed_;
  while (records_.size() > limit_) records_.pop_front();
}

std::vector<UpdateRecord> UpdateHistory::Latest(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t start = records_.size() > n ? records_.size() - n : 0;
  return std::vector<UpdateRecord>(records_.begin() + start, records_.end());
}

uint64_t UpdateHistory::committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

uint64_t UpdateHistory::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

absl::Time UpdateHistory::last_committed_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_committed_at_;
}

uint64_t UpdateHistory::bytes_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_sent_;
}

}  // namespace wsync
