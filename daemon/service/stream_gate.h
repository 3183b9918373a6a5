#ifndef WSYNC_DAEMON_SERVICE_STREAM_GATE_H_
#define WSYNC_DAEMON_SERVICE_STREAM_GATE_H_

#include <grpc/grpc.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/service/caller.h"

namespace wsync {

// What a stream must do to keep its place.
enum class StreamProgress {
  // Nothing: it lives as long as what it stands for (a session's hold, a health watch).
  kNone,
  // Its first message within the idle timeout (an update's begin); the core's deadlines rule
  // after that.
  kFirstMessage,
  // A message within the idle timeout of the one before (reflection: a tool's questions).
  kEveryMessage,
};

// A stream's rule, and what it waits for, as its deadline's error names it ("begin").
struct StreamRule {
  StreamProgress progress = StreamProgress::kNone;
  std::string awaited = "a message";
};

struct StreamLimits {
  int per_connection = 16;
  int per_caller = 64;
  // Over every caller: below the server's threads, so that unary calls are still served.
  int total = 384;
  absl::Duration idle_timeout = absl::Seconds(10);
};

// Every synchronous stream holds a server thread for its life, so streams are admitted only
// within limits per connection, per caller and in all; one that does not progress as its rule
// says is cancelled with DEADLINE_EXCEEDED by the gate's own thread. Calls over the in-process
// channel (code inside wsyncd) are not limited, but keep the deadlines.
class StreamGate {
 public:
  // A stream's place; gives it back when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : gate_(other.gate_), id_(other.id_) { other.gate_ = nullptr; }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Reset(); }
    // A message arrived: the stream's deadline moves (or ends) as its rule says.
    void Progress();
    void Reset();

   private:
    friend class StreamGate;
    Ticket(StreamGate* gate, uint64_t id) : gate_(gate), id_(id) {}
    StreamGate* gate_ = nullptr;
    uint64_t id_ = 0;
  };

  explicit StreamGate(StreamLimits limits);
  // Stops the deadline thread; every ticket must be gone.
  ~StreamGate();

  // Admits a stream of `caller` named `call` on `call_handle` (the gRPC call it cancels at the
  // deadline, alive while the ticket is), or RESOURCE_EXHAUSTED naming the limit it would pass
  // and the flag that sets it.
  absl::StatusOr<Ticket> Admit(const Caller& caller, const std::string& call,
                               grpc_call* call_handle, StreamRule rule);

  const StreamLimits& limits() const { return limits_; }
  int open_streams() const;

 private:
  struct Entry {
    std::string connection;  // empty: not counted (in-process)
    std::string identity;
    std::string call;
    grpc_call* handle = nullptr;
    StreamRule rule;
    absl::Time due = absl::InfiniteFuture();
    bool cancelled = false;
  };

  void Release(uint64_t id);
  void Progress(uint64_t id);
  void ReapLoop();
  // Counts a refusal, and logs at most one line every few seconds with the count since.
  void NoteRefusalLocked(const std::string& why);

  const StreamLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Entry> entries_;
  std::map<std::string, int> per_connection_;
  std::map<std::string, int> per_caller_;
  int counted_ = 0;
  int refused_since_log_ = 0;
  absl::Time last_refusal_log_ = absl::InfinitePast();
  std::thread reaper_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_STREAM_GATE_H_
