#ifndef WSYNC_DAEMON_TRANSPORT_IPC_STREAM_BUCKET_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_STREAM_BUCKET_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/transport.h"
#include "daemon/transport/ipc/checkpoint_engine_stream.h"
#include "daemon/transport/ipc/ipc_bucket.h"

namespace wsync {

// One bucket on streamed engines (DataPath::kCudaIpcStream): one exchange per engine, queued on
// that engine's stream. As with IpcBucket the sources are reusable only once every engine has
// answered, since each rank reads them in place until it does.
class StreamBucket final : public BucketHandle {
 public:
  using FailureHook = std::function<void(const absl::Status&)>;

  // `urls` and `results` hold one entry per engine, in the same order.
  StreamBucket(std::vector<std::string> urls, std::vector<std::shared_ptr<StreamResult>> results,
               std::shared_ptr<IpcFormation> formation, FailureHook on_failure);

  bool launched() const override { return true; }
  absl::StatusOr<WireTiming> WaitReusable() override;
  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes) override;
  absl::Time requests_written_at() const override;
  absl::Time answered_at() const override { return answered_at_; }

 private:
  // Waits for every engine once; the combined error names each engine that failed.
  absl::Status Collect();

  const std::vector<std::string> urls_;
  const std::vector<std::shared_ptr<StreamResult>> results_;
  const std::shared_ptr<IpcFormation> formation_;
  FailureHook on_failure_;
  std::vector<absl::Status> statuses_;
  bool collected_ = false;
  absl::Status combined_;
  absl::Time answered_at_ = absl::InfinitePast();
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_STREAM_BUCKET_H_
