#ifndef WSYNC_DAEMON_CORE_UPDATE_HISTORY_H_
#define WSYNC_DAEMON_CORE_UPDATE_HISTORY_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/wire_volume.h"

namespace wsync {

struct UpdateRecord {
  std::string update_id;
  std::string group;
  std::string version;
  std::string session_id;
  std::string state;  // running, committed, failed, aborted
  absl::Status status;
  uint64_t buckets = 0;
  uint64_t bytes = 0;
  std::optional<WireVolume> wire_volume;  // UpdateOutcome's
  double seconds = 0;
  absl::Time started;
  std::vector<std::string> engine_results;
  // The engines (URLs) whose outcome was ok: what readers decide on (the relay's lag), not the
  // texts above.
  std::vector<std::string> committed_engines;
};

// A record's texts are cut so that the history stays small whatever the engines and the trainer
// sent: `limit` records of at most kMaxRecordEngines + 1 texts of kMaxRecordTextBytes each.
inline constexpr size_t kMaxRecordTextBytes = 4096;
inline constexpr size_t kMaxRecordEngines = 256;
UpdateRecord BoundedRecord(UpdateRecord record);

// The last `limit` updates, newest last.
class UpdateHistory {
 public:
  explicit UpdateHistory(size_t limit) : limit_(limit) {}
  void Upsert(const UpdateRecord& record);
  std::vector<UpdateRecord> Latest(size_t n) const;
  uint64_t committed() const;
  uint64_t failed() const;
  uint64_t bytes_sent() const;
  // When the last committed update ended (InfinitePast: none yet).
  absl::Time last_committed_at() const;

 private:
  const size_t limit_;
  mutable std::mutex mu_;
  std::deque<UpdateRecord> records_;
  uint64_t committed_ = 0;
  uint64_t failed_ = 0;
  uint64_t bytes_sent_ = 0;
  absl::Time last_committed_at_ = absl::InfinitePast();
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_UPDATE_HISTORY_H_
