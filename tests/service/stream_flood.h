#ifndef WSYNC_TESTS_SERVICE_STREAM_FLOOD_H_
#define WSYNC_TESTS_SERVICE_STREAM_FLOOD_H_

// Many streaming calls held open at once, as a stranger or a careless tool opens them: each is
// started and then left alone (nothing sent, nothing half-closed) until the server ends it or the
// flood is destroyed. Calls go out through gRPC's generic stub, so any method can be named.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace wsync {

// A channel with a connection of its own (channels with the same target and arguments share
// one otherwise), so a flood spreads over as many connections as it has channels.
inline std::shared_ptr<grpc::Channel> OwnConnection(
    const std::string& target,
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials(),
    grpc::ChannelArguments args = {}) {
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, credentials, args);
}

class StreamFlood {
 public:
  struct Ended {
    grpc::Status status;
    absl::Duration after;  // from the flood's start
  };

  // Opens `calls` calls of `method`, round robin over `channels`, each with `metadata` and a
  // deadline of `deadline` from now.
  StreamFlood(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
              const std::string& method, int calls, absl::Duration deadline,
              const std::multimap<std::string, std::string>& metadata = {})
      : started_(absl::Now()), calls_(calls) {
    for (const auto& channel : channels)
      stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
    for (int i = 0; i < calls; ++i) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(absl::ToChronoTime(started_ + deadline));
      for (const auto& [key, value] : metadata) call->context.AddMetadata(key, value);
      call->stream = stubs_[i % stubs_.size()]->PrepareCall(&call->context, method, &cq_);
      call->stream->StartCall(Tag(i, false));
      call->stream->Finish(&call->status, Tag(i, true));
      calls_list_.push_back(std::move(call));
    }
    poller_ = std::thread([this] { Poll(); });
  }

  ~StreamFlood() {
    for (auto& call : calls_list_) call->context.TryCancel();
    WaitEnded(absl::Seconds(30));
    cq_.Shutdown();
    poller_.join();
  }

  // Waits until `count` calls (every call: -1) have ended or `timeout` passes; returns how many
  // have ended.
  int WaitEnded(absl::Duration timeout, int count = -1) {
    const int want = count < 0 ? calls_ : count;
    const absl::Time deadline = absl::Now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, absl::ToChronoTime(deadline),
                   [&] { return static_cast<int>(ended_.size()) >= want; });
    return static_cast<int>(ended_.size());
  }

  int ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(ended_.size());
  }
  // The calls ended so far.
  std::vector<Ended> endings() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Ended> out;
    for (const auto& [i, e] : ended_) out.push_back(e);
    return out;
  }
  int Count(grpc::StatusCode code) {
    int n = 0;
    for (const Ended& e : endings()) n += e.status.error_code() == code ? 1 : 0;
    return n;
  }
  // One message of an ending with `code`, or "".
  std::string MessageOf(grpc::StatusCode code) {
    for (const Ended& e : endings()) {
      if (e.status.error_code() == code) return e.status.error_message();
    }
    return "";
  }

 private:
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
    grpc::Status status;
  };
  static void* Tag(int i, bool finish) {
    return reinterpret_cast<void*>(static_cast<intptr_t>(i) * 2 + (finish ? 1 : 0));
  }

  void Poll() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
      const intptr_t t = reinterpret_cast<intptr_t>(tag);
      if (t % 2 == 0) continue;  // started
      std::lock_guard<std::mutex> lock(mu_);
      const int i = static_cast<int>(t / 2);
      ended_[i] = Ended{calls_list_[i]->status, absl::Now() - started_};
      cv_.notify_all();
    }
  }

  const absl::Time started_;
  const int calls_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::vector<std::unique_ptr<Call>> calls_list_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Ended> ended_;
  std::thread poller_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SERVICE_STREAM_FLOOD_H_
