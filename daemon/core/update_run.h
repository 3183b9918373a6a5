#ifndef WSYNC_DAEMON_CORE_UPDATE_RUN_H_
#define WSYNC_DAEMON_CORE_UPDATE_RUN_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/manifest.h"
#include "daemon/core/buffer_pool.h"
#include "daemon/core/weight_group.h"

namespace wsync {

struct UpdateOutcome {
  std::string update_id;
  absl::Status status;
  std::vector<EngineOutcome> engines;
  uint64_t buckets = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// What the trainer hears while its update runs (the gRPC stream implements it).
class UpdateEvents {
 public:
  virtual ~UpdateEvents() = default;
  virtual void BucketDone(uint64_t sequence, uint64_t bytes, uint32_t tensors, double seconds) = 0;
  virtual void SlotFree(uint32_t slot) = 0;
  // The update failed while the trainer may be waiting for a SlotFree that will never come; the
  // stream tells it now instead of at its next message.
  virtual void Failed(const UpdateOutcome& outcome) = 0;
};

struct UpdateContext {
  std::string update_id;
  std::string session_id;
  int device = 0;
  std::vector<SlotMemory*> slots;
  std::string version;
  absl::Duration bucket_timeout = absl::Seconds(120);
};

// One update of one group from one session. Buckets are validated when they arrive (nothing of a
// refused bucket is sent) and sent in order by one sender thread, so the trainer fills the next
// slot while the previous bucket is on the wire.
class UpdateRun {
 public:
  using DoneCallback = std::function<void(const UpdateOutcome&)>;
  UpdateRun(UpdateContext context, std::shared_ptr<WeightGroup> group, BufferPool* pool,
            UpdateEvents* events, DoneCallback on_done);
  ~UpdateRun();

  const std::string& id() const { return context_.update_id; }
  uint32_t world_size() const;

  // Refuses (and fails the update) on any problem with the bucket; the bucket's bytes go nowhere.
  absl::Status SubmitBucket(uint32_t slot, BucketManifest manifest, uint32_t checksum,
                            uint64_t sequence);
  UpdateOutcome Commit();
  UpdateOutcome Abort(absl::Status reason);
  // The first failure, if any (a failed update still needs Abort to finish it).
  absl::Status failure();

 private:
  struct Pending {
    uint32_t slot;
    BucketManifest manifest;
    uint32_t checksum;
    uint64_t sequence;
  };
  void SenderLoop();
  void Fail(absl::Status status);
  UpdateOutcome Finish(bool commit, absl::Status reason);

  UpdateContext context_;
  std::shared_ptr<WeightGroup> group_;
  BufferPool* pool_;
  UpdateEvents* events_;
  DoneCallback on_done_;
  const absl::Time started_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool closing_ = false;
  bool finished_ = false;
  absl::Status failure_;
  std::set<std::string> names_;
  std::vector<EngineOutcome> bucket_outcomes_;
  uint64_t buckets_ = 0;
  uint64_t bytes_ = 0;
  std::thread sender_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_UPDATE_RUN_H_
