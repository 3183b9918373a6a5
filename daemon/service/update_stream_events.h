#ifndef WSYNC_DAEMON_SERVICE_UPDATE_STREAM_EVENTS_H_
#define WSYNC_DAEMON_SERVICE_UPDATE_STREAM_EVENTS_H_

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "daemon/core/update_run.h"
#include "wsync/v1/trainer.grpc.pb.h"

namespace wsync {

// The update's events as the trainer's stream carries them. The pipeline's threads (sender,
// reuse, answer) and the handler only queue events; one writer thread per stream writes them in
// order. A trainer that stops reading its stream so stalls only that writer, never the pipeline:
// its buckets settle, so the idle deadline can end its update and the engines are freed. A write
// pending past `stall_timeout`, or more than kMaxQueued events waiting, cancels the call (the
// trainer is not reading), which ends the handler's reads and writes.
class UpdateStreamEvents final : public UpdateEvents {
 public:
  using Stream = grpc::ServerReaderWriter<v1::UpdateEvent, v1::UpdateRequest>;
  UpdateStreamEvents(grpc::ServerContext* context, Stream* stream, absl::Duration stall_timeout);
  // Writes what is queued (bounded by the stall timeout) and stops the writer: the handler may
  // not return while a write is in flight.
  ~UpdateStreamEvents() override;

  void BucketDone(uint64_t sequence, uint64_t bytes, uint32_t tensors,
                  const BucketTiming& timing) override;
  void SlotFree(uint32_t slot) override;
  void SourcesRead(uint64_t sequence) override;
  void Failed(const UpdateOutcome& outcome) override { WriteResult(outcome); }
  // The result goes out once, whoever reaches it first (the sender on a failure, or the handler).
  void WriteResult(const UpdateOutcome& outcome);
  void Write(v1::UpdateEvent e);

  static constexpr size_t kMaxQueued = 4096;

 private:
  void WriterLoop();
  void WatchLoop();
  void CancelLocked(const char* why);

  grpc::ServerContext* const context_;
  Stream* const stream_;
  const absl::Duration stall_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::UpdateEvent> queue_;
  bool result_sent_ = false;
  bool closing_ = false;
  bool cancelled_ = false;
  // When the write in flight began; InfinitePast while none is.
  absl::Time writing_since_ = absl::InfinitePast();
  std::thread writer_;
  std::thread watcher_;
};

// The proto form of an update's outcome.
v1::UpdateEvent ResultEvent(const UpdateOutcome& outcome);

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_UPDATE_STREAM_EVENTS_H_
