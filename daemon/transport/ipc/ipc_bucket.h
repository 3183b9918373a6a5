#ifndef WSYNC_DAEMON_TRANSPORT_IPC_IPC_BUCKET_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_IPC_BUCKET_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/transport.h"
#include "daemon/transport/http/bucket_answers.h"
#include "daemon/transport/http/update_channel.h"
#include "daemon/transport/ipc/engine_drops.h"

namespace wsync {

// One formation of an IPC group, as its buckets share it: whether any bucket failed. After a
// failure no later bucket reaches an engine (an engine that took part of a version holds a mix of
// two) until the group forms again.
struct IpcFormation {
  FailureLatch latch;
};

// One bucket on the IPC path: each engine's request names wsyncd's memory (one view per TP rank),
// and the engine's ranks read it while the request runs. So the bucket's sources are reusable
// only once every engine has answered: WaitReusable waits for the answers. Requests are written
// in bucket order on each engine's pipelined channel, so request k+1 waits at the engine while it
// loads bucket k.
//
// In a quorum group (`drops`), an engine dropped by an earlier bucket gets no request, and an
// engine that fails this one is dropped where enough engines remain: the bucket then succeeds for
// the others, and the failed engine's outcome says why it was left out.
class IpcBucket final : public BucketHandle {
 public:
  using FailureHook = std::function<void(const absl::Status&)>;

  // `requests` and `channels` hold one entry per adapter, in the same order.
  static std::unique_ptr<IpcBucket> Start(
      const std::vector<EngineAdapter*>& adapters,
      const std::vector<std::shared_ptr<UpdateChannel>>& channels,
      const std::vector<EngineRequest>& requests, std::shared_ptr<IpcFormation> formation,
      absl::Time deadline, FailureHook on_failure, std::shared_ptr<EngineDrops> drops = nullptr);
  ~IpcBucket() override;

  bool launched() const override { return launch_status_.ok(); }
  // Waits for every engine's answer: until then the engines may still read the sources.
  absl::StatusOr<WireTiming> WaitReusable() override;
  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes) override;
  absl::Time requests_written_at() const override;
  absl::Time answered_at() const override { return answered_at_; }

 private:
  IpcBucket(std::vector<EngineAdapter*> adapters,
            std::vector<std::shared_ptr<UpdateChannel>> channels,
            std::shared_ptr<IpcFormation> formation, absl::Time deadline, FailureHook on_failure,
            std::shared_ptr<EngineDrops> drops);
  absl::Status Launch(const std::vector<EngineRequest>& requests);
  // Waits for the answers once; the combined error names every engine that failed.
  absl::Status Collect();
  void CancelAll(absl::string_view why);

  const std::vector<EngineAdapter*> adapters_;
  const std::vector<std::shared_ptr<UpdateChannel>> channels_;
  const std::shared_ptr<IpcFormation> formation_;
  const absl::Time deadline_;
  FailureHook on_failure_;
  const std::shared_ptr<EngineDrops> drops_;  // null: no engine is ever dropped
  absl::Status launch_status_;
  std::vector<std::shared_ptr<ChannelCall>> calls_;  // per engine, once written
  std::vector<absl::Status> results_;                // per engine, after Collect
  std::vector<bool> skipped_;  // per engine: dropped before this bucket, sent nothing
  bool collected_ = false;
  absl::Status combined_;
  absl::Time answered_at_ = absl::InfinitePast();
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_IPC_BUCKET_H_
