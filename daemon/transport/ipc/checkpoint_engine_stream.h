#ifndef WSYNC_DAEMON_TRANSPORT_IPC_CHECKPOINT_ENGINE_STREAM_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_CHECKPOINT_ENGINE_STREAM_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/transport/http/update_channel.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "daemon/transport/ipc/stream_sockets.h"

namespace wsync {

// The outcome of one exchange on a stream (a bucket, or the end of the update), set once.
class StreamResult {
 public:
  void Set(absl::Status status);
  // Blocks until Set; a stream sets every result it queued by the result's own deadline.
  absl::Status Wait();
  // When the frames went out (InfinitePast unless they all did) and when it was set.
  absl::Time written_at() const;
  absl::Time ended_at() const;
  void MarkWritten();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
  absl::Time written_at_ = absl::InfinitePast();
  absl::Time ended_at_ = absl::InfinitePast();
};

// One engine's update over checkpoint-engine's ZMQ protocol (docs/engines/sglang.md, the map-once
// route), the one SGLang's /update_weights_from_ipc speaks. wsyncd binds one REQ socket per TP rank
// and posts the adapter's opening request, whose handler makes each rank connect a REP socket to
// its address. Then, per rank and in lockstep (each message answered before the next):
//   1. (FUNC, ARGS) of the rank's buffer as one uint8 tensor: the rank maps it once per update;
//   2. per bucket, [{name, shape, dtype, offset}, ...]: the rank views its tensors at those byte
//      offsets, loads them and synchronizes its device before answering, so the answer frees the
//      bucket's memory;
//   3. None, and a second None: newer workers drop the mapping at the first and post-process the
//      weights at the second; older ones post-process at the first and return. Either way the
//      engine answers the opening request once every rank is done, and that answer (not the
//      socket) is the update's outcome.
// An empty reply is success; anything else is the rank's error (its traceback, or on some worker
// releases a pickled exception). A pickled RuntimeError makes a rank give up (Abort).
//
// The ranks read the buffer as soon as a bucket's message arrives, without waiting on an event,
// so wsyncd waits for the producer's writes before it sends one. The whole update lies in one
// allocation per rank (the device's slots are regions of one, and a zero-copy trainer's flat
// buffer is one): a bucket elsewhere is refused before anything is sent.
class CheckpointEngineStream {
 public:
  // Binds the sockets, then posts the opening request on `channel` (written by `deadline`).
  // `rank_gpus` holds each TP rank's GPU UUID, in rank order.
  static absl::StatusOr<std::unique_ptr<CheckpointEngineStream>> Open(
      StreamSockets* sockets, EngineAdapter* adapter, std::shared_ptr<UpdateChannel> channel,
      const UpdateInfo& update, const std::vector<std::string>& rank_gpus, absl::Time deadline);
  // Aborts an exchange that did not finish, then closes the sockets.
  ~CheckpointEngineStream();
  CheckpointEngineStream(const CheckpointEngineStream&) = delete;
  CheckpointEngineStream& operator=(const CheckpointEngineStream&) = delete;

  // Queues one bucket behind the earlier ones: `views` holds rank r's view of it, and `producers`
  // the slots whose writes must be done before any rank reads. After a failure every later
  // bucket fails with the first error, sending nothing.
  std::shared_ptr<StreamResult> Send(const BucketManifest& manifest,
                                     std::vector<IpcBucketView> views,
                                     std::vector<SlotMemory*> producers, absl::Time deadline);
  // After the last bucket: ends the exchange and returns the engine's answer to the opening
  // request, judged by the adapter.
  absl::Status Finish(absl::Time deadline);
  // Ends the exchange early: every rank is told to give up, and queued buckets fail with `why`.
  void Abort(absl::string_view why);
  const std::string& url() const { return adapter_->endpoint().url; }

 private:
  struct Job {
    bool finish = false;
    BucketManifest manifest;
    std::vector<IpcBucketView> views;
    std::vector<SlotMemory*> producers;
    absl::Time deadline;
    std::shared_ptr<StreamResult> result;
  };
  // What a wait for the ranks' replies ended on.
  enum class Ended { kReplies, kAnswered };

  CheckpointEngineStream(EngineAdapter* adapter, std::vector<std::unique_ptr<StreamSocket>> ranks,
                         std::vector<std::string> rank_gpus);
  void Run();
  absl::Status RunBucket(const Job& job);
  absl::Status RunFinish(const Job& job);
  // Sends frames[r] to every rank r with one and waits for their replies. With `answer_ends`, the
  // engine answering the opening request also ends the wait (kAnswered); otherwise that answer
  // is an error, since it came before every rank was done.
  absl::StatusOr<Ended> Exchange(const std::vector<std::string>& frames, absl::string_view what,
                                 absl::Time deadline, bool answer_ends = false);
  // Between polls of `pending` ranks: an abort, the engine's answer (kAnswered with
  // `answer_ends`, else AnsweredEarly) or the deadline ("<ranks>: <late> <what> before the
  // deadline<hint>") ends the wait; nullopt keeps waiting.
  std::optional<absl::StatusOr<Ended>> Interrupted(const std::vector<size_t>& pending,
                                                   absl::string_view what, absl::Time deadline,
                                                   bool answer_ends, absl::string_view late,
                                                   absl::string_view hint);
  // The error for an opening request that was answered while ranks still owed a reply.
  absl::Status AnsweredEarly(absl::string_view what);
  absl::Status Aborted() const;
  std::string RankName(size_t rank) const;

  EngineAdapter* const adapter_;
  std::shared_ptr<UpdateChannel> channel_;
  std::shared_ptr<ChannelCall> call_;  // the opening request
  std::vector<std::unique_ptr<StreamSocket>> ranks_;
  const std::vector<std::string> rank_gpus_;
  std::vector<std::string> mapped_;  // per rank: the handle of the buffer it mapped, or ""
  uint64_t buckets_sent_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  absl::Status failed_;   // the first failure: later jobs fail with it
  absl::Status aborted_;  // set by Abort
  bool abort_sent_ = false;
  bool finished_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_CHECKPOINT_ENGINE_STREAM_H_
