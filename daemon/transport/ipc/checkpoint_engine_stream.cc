#include "daemon/transport/ipc/checkpoint_engine_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/core/peer_text.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "daemon/transport/ipc/ipc_view.h"

namespace wsync {
namespace {

absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

// How often a wait for replies also checks for an abort and for the engine's answer.
constexpr absl::Duration kPollSlice = absl::Milliseconds(10);

// A rank's non-empty reply, for an error message: a traceback's last line (the exception), or,
// for a pickled exception, its printable runs.
std::string ReplyText(const std::string& reply) {
  if (!reply.empty() && static_cast<unsigned char>(reply[0]) == 0x80) {
    std::string runs;
    std::string run;
    for (char c : reply) {
      if (c >= 0x20 && c < 0x7f) {
        run.push_back(c);
        continue;
      }
      if (run.size() >= 4) absl::StrAppend(&runs, runs.empty() ? "" : " ", run);
      run.clear();
    }
    if (run.size() >= 4) absl::StrAppend(&runs, runs.empty() ? "" : " ", run);
    return absl::StrCat("a pickled exception: ", SanitizePeerText(runs, 300));
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(reply, absl::ByAnyChar("\r\n"), absl::SkipWhitespace());
  return SanitizePeerText(lines.empty() ? reply : lines.back(), 300);
}

}  // namespace

void StreamResult::Set(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  status_ = std::move(status);
  ended_at_ = absl::Now();
  cv_.notify_all();
}

absl::Status StreamResult::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

void StreamResult::MarkWritten() {
  std::lock_guard<std::mutex> lock(mu_);
  written_at_ = absl::Now();
}

absl::Time StreamResult::written_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_at_;
}

absl::Time StreamResult::ended_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_at_;
}

CheckpointEngineStream::CheckpointEngineStream(EngineAdapter* adapter,
                                               std::vector<std::unique_ptr<StreamSocket>> ranks,
                                               std::vector<std::string> rank_gpus)
    : adapter_(adapter),
      ranks_(std::move(ranks)),
      rank_gpus_(std::move(rank_gpus)),
      mapped_(ranks_.size()) {}

absl::StatusOr<std::unique_ptr<CheckpointEngineStream>> CheckpointEngineStream::Open(
    StreamSockets* sockets, EngineAdapter* adapter, std::shared_ptr<UpdateChannel> channel,
    const UpdateInfo& update, const std::vector<std::string>& rank_gpus, absl::Time deadline) {
  // Each rank's socket admits the engine's own workers alone.
  WSYNC_ASSIGN_OR_RETURN(const EngineProcess engine, sockets->FindEngine(adapter->endpoint().url));
  std::vector<std::unique_ptr<StreamSocket>> ranks;
  std::vector<IpcStreamRank> named;
  for (const std::string& gpu : rank_gpus) {
    WSYNC_ASSIGN_OR_RETURN(
        auto socket,
        sockets->Bind(engine, absl::StrCat("engine ", adapter->endpoint().url, " TP rank ",
                                           ranks.size(), " (GPU ", gpu, ")")));
    named.push_back(IpcStreamRank{gpu, socket->address()});
    ranks.push_back(std::move(socket));
  }
  WSYNC_ASSIGN_OR_RETURN(IpcStreamBinding * binding, IpcStreamBindingOf(*adapter));
  WSYNC_ASSIGN_OR_RETURN(EngineRequest request, binding->StreamRequest(update, named));
  auto stream = std::unique_ptr<CheckpointEngineStream>(
      new CheckpointEngineStream(adapter, std::move(ranks), rank_gpus));
  auto call = channel->Post(request.path, request.json_body, deadline);
  if (!call.ok()) {
    return absl::Status(call.status().code(), absl::StrCat("engine ", adapter->endpoint().url, ": ",
                                                           call.status().message()));
  }
  stream->channel_ = std::move(channel);
  stream->call_ = *std::move(call);
  stream->thread_ = std::thread([s = stream.get()] { s->Run(); });
  return stream;
}

CheckpointEngineStream::~CheckpointEngineStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_ && aborted_.ok()) aborted_ = absl::AbortedError("the stream was dropped");
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string CheckpointEngineStream::RankName(size_t rank) const {
  return absl::StrCat("engine ", url(), " TP rank ", rank, " (GPU ", rank_gpus_[rank], ")");
}

absl::Status CheckpointEngineStream::Aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

std::shared_ptr<StreamResult> CheckpointEngineStream::Send(const BucketManifest& manifest,
                                                           std::vector<IpcBucketView> views,
                                                           std::vector<SlotMemory*> producers,
                                                           absl::Time deadline) {
  auto result = std::make_shared<StreamResult>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{false, manifest, std::move(views), std::move(producers), deadline, result});
  }
  cv_.notify_all();
  return result;
}

absl::Status CheckpointEngineStream::Finish(absl::Time deadline) {
  auto result = std::make_shared<StreamResult>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{true, {}, {}, {}, deadline, result});
  }
  cv_.notify_all();
  absl::Status s = result->Wait();
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = s.ok();
  return s;
}

void CheckpointEngineStream::Abort(absl::string_view why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A finished stream's ranks have returned: there is no one left to tell.
    if (finished_) return;
    if (aborted_.ok()) aborted_ = absl::AbortedError(why);
  }
  cv_.notify_all();
}

void CheckpointEngineStream::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stopping_ || !jobs_.empty() || (!aborted_.ok() && !abort_sent_); });
      if (!aborted_.ok() && !abort_sent_) {
        // Every rank hears it, busy or not (the sockets take a request while a reply is owed):
        // the worker raises, and the engine answers its request with the failure.
        abort_sent_ = true;
        const std::string frame = CheckpointEngineAbortFrame(aborted_.message());
        lock.unlock();
        for (auto& rank : ranks_) (void)rank->TrySend(frame);
        continue;
      }
      if (jobs_.empty()) return;  // stopping
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    absl::Status prior;
    {
      std::lock_guard<std::mutex> lock(mu_);
      prior = !failed_.ok() ? failed_ : aborted_;
    }
    if (!prior.ok()) {
      job.result->Set(prior);
      continue;
    }
    absl::Status s = job.finish ? RunFinish(job) : RunBucket(job);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_.ok()) failed_ = s;
    }
    job.result->Set(s);
  }
}

absl::Status CheckpointEngineStream::RunBucket(const Job& job) {
  const uint64_t index = buckets_sent_++;
  const std::string what = absl::StrCat("bucket ", index);
  if (job.views.size() != ranks_.size()) {
    return absl::InternalError(absl::StrCat("engine ", url(), ": ", job.views.size(),
                                            " view(s) for ", ranks_.size(), " TP rank(s)"));
  }
  // Every frame is built before anything is sent: a bucket that cannot be described reaches no
  // rank.
  std::vector<std::string> maps(ranks_.size());
  std::vector<std::string> buckets(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const IpcBucketView& view = job.views[r];
    if (!mapped_[r].empty() && mapped_[r] != view.memory_handle) {
      return absl::FailedPreconditionError(absl::StrCat(
          RankName(r), ": ", what,
          " lies in another allocation than the update's earlier buckets, and this route maps "
          "one buffer per update (a tensor larger than a slot travels in a slot of its own, and "
          "a trainer's tensors read in place may lie in several allocations): raise wsyncd's "
          "--slot-bytes above the largest tensor, read in place from one flat buffer, or use the "
          "group's tensor route"));
    }
    if (mapped_[r].empty()) {
      IpcBucketView whole = view;
      whole.offset = 0;
      whole.event_handle.clear();
      // The worker replaces the device argument with its own index.
      auto storage = IpcStorage(whole, CudaDevice(0));
      if (!storage.ok()) return Prefixed(RankName(r), storage.status());
      storage->dtype = "uint8";
      storage->shape = {static_cast<int64_t>(view.allocation_bytes)};
      storage->element_offset = 0;
      auto frame = CheckpointEngineBufferFrame(*storage);
      if (!frame.ok()) return Prefixed(RankName(r), frame.status());
      maps[r] = *std::move(frame);
    }
    std::vector<CheckpointEngineTensor> tensors;
    for (const TensorEntry& t : job.manifest.tensors) {
      tensors.push_back(CheckpointEngineTensor{t.name, t.shape, std::string(DTypeName(t.dtype)),
                                               view.offset + t.offset});
    }
    auto frame = CheckpointEngineBucketFrame(tensors, view.allocation_bytes);
    if (!frame.ok()) return Prefixed(RankName(r), frame.status());
    buckets[r] = *std::move(frame);
  }
  // The ranks read on arrival, without an event to wait on.
  for (SlotMemory* slot : job.producers) {
    WSYNC_RETURN_IF_ERROR(
        slot->WaitProducer(std::max(job.deadline - absl::Now(), absl::ZeroDuration())));
  }
  if (std::any_of(maps.begin(), maps.end(), [](const std::string& m) { return !m.empty(); })) {
    WSYNC_RETURN_IF_ERROR(Exchange(maps, "the buffer's handle", job.deadline).status());
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (!maps[r].empty()) mapped_[r] = job.views[r].memory_handle;
    }
  }
  job.result->MarkWritten();
  return Exchange(buckets, what, job.deadline).status();
}

absl::Status CheckpointEngineStream::RunFinish(const Job& job) {
  const std::vector<std::string> none(ranks_.size(), CheckpointEngineNoneFrame());
  WSYNC_ASSIGN_OR_RETURN(Ended first, Exchange(none, "the end of the update", job.deadline,
                                               /*answer_ends=*/true));
  // Workers that post-process at the first None have returned (the engine answers), the newer
  // ones wait for the second.
  if (first == Ended::kReplies) {
    WSYNC_RETURN_IF_ERROR(Exchange(none, "the post-processing step", job.deadline,
                                   /*answer_ends=*/true)
                              .status());
  }
  auto reply = call_->Wait(job.deadline);
  if (!reply.ok()) {
    if (reply.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrCat("engine ", url(),
                       " did not answer its update request before the deadline, though "
                       "every rank finished (engine hung?)"));
    }
    return absl::Status(reply.status().code(),
                        absl::StrCat("engine ", url(), ": ", reply.status().message()));
  }
  return adapter_->CheckBucketReply(*reply);
}

absl::Status CheckpointEngineStream::AnsweredEarly(absl::string_view what) {
  auto reply = call_->Wait(absl::Now());
  absl::Status judged = reply.ok() ? adapter_->CheckBucketReply(*reply) : reply.status();
  if (judged.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url(), " answered its update request as done before every rank took ", what,
        ": its workers do not speak this protocol"));
  }
  return absl::Status(judged.code(), absl::StrCat("engine ", url(), " failed during ", what, ": ",
                                                  judged.message()));
}

std::optional<absl::StatusOr<CheckpointEngineStream::Ended>> CheckpointEngineStream::Interrupted(
    const std::vector<size_t>& pending, absl::string_view what, absl::Time deadline,
    bool answer_ends, absl::string_view late, absl::string_view hint) {
  if (absl::Status aborted = Aborted(); !aborted.ok()) return aborted;
  if (call_->ended_at() != absl::InfinitePast()) {
    if (answer_ends) return Ended::kAnswered;
    return AnsweredEarly(what);
  }
  if (absl::Now() < deadline) return std::nullopt;
  std::vector<std::string> names;
  for (size_t r : pending) names.push_back(absl::StrCat(RankName(r), ranks_[r]->RefusalNote()));
  return absl::DeadlineExceededError(absl::StrCat(absl::StrJoin(names, ", "), ": ", late, " ", what,
                                                  " before the deadline", hint));
}

absl::StatusOr<CheckpointEngineStream::Ended> CheckpointEngineStream::Exchange(
    const std::vector<std::string>& frames, absl::string_view what, absl::Time deadline,
    bool answer_ends) {
  // Sent: a rank takes its frame once it has connected (the engine's handler connects them).
  std::vector<size_t> unsent;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!frames[r].empty()) unsent.push_back(r);
  }
  std::vector<size_t> owed;
  std::vector<bool> ready;
  while (!unsent.empty()) {
    for (auto it = unsent.begin(); it != unsent.end();) {
      WSYNC_ASSIGN_OR_RETURN(bool sent, ranks_[*it]->TrySend(frames[*it]));
      if (sent) {
        owed.push_back(*it);
        it = unsent.erase(it);
      } else {
        ++it;
      }
    }
    if (unsent.empty()) break;
    if (auto ended = Interrupted(unsent, what, deadline, answer_ends, "never connected to take",
                                 " (is the engine's filesystem where wsyncd's sockets are? see "
                                 "ipc_socket_dir)")) {
      return *std::move(ended);
    }
    std::vector<StreamSocket*> waiting;
    for (size_t r : unsent) waiting.push_back(ranks_[r].get());
    WSYNC_RETURN_IF_ERROR(StreamSocket::Poll(waiting, /*writable=*/true, kPollSlice, &ready));
  }
  std::vector<std::string> errors;
  absl::Status first;
  while (!owed.empty()) {
    std::vector<StreamSocket*> waiting;
    for (size_t r : owed) waiting.push_back(ranks_[r].get());
    WSYNC_RETURN_IF_ERROR(StreamSocket::Poll(waiting, /*writable=*/false, kPollSlice, &ready));
    for (auto it = owed.begin(); it != owed.end();) {
      auto received = ranks_[*it]->TryReceive();
      // A reply from another process than the rank's (the socket's gate names both) fails the
      // bucket: only the rank's own answer says it loaded it.
      if (!received.ok()) return Prefixed(RankName(*it), received.status());
      const std::optional<std::string>& reply = *received;
      if (!reply.has_value()) {
        ++it;
        continue;
      }
      if (!reply->empty()) {
        absl::Status s = absl::InternalError(
            absl::StrCat(RankName(*it), " failed to load ", what, ": ", ReplyText(*reply)));
        if (first.ok()) first = s;
        errors.push_back(std::string(s.message()));
      }
      it = owed.erase(it);
    }
    if (owed.empty()) break;
    if (auto ended =
            Interrupted(owed, what, deadline, answer_ends, "no answer to", " (engine hung?)")) {
      return *std::move(ended);
    }
  }
  if (!first.ok()) return absl::Status(first.code(), absl::StrJoin(errors, "; "));
  return Ended::kReplies;
}

}  // namespace wsync
