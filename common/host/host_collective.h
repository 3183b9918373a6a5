#ifndef WSYNC_COMMON_HOST_HOST_COLLECTIVE_H_
#define WSYNC_COMMON_HOST_HOST_COLLECTIVE_H_

// A TCP stand-in for NCCL's broadcast, so every layer above the GPU seam runs on machines without
// GPUs. Like an ncclUniqueId, its 128-byte id carries the root's address; peers get it from the
// daemon's rendezvous store under the same key real engines read.
//
// Id layout: "WSYNCHC1" | u16 port (LE) | 16-byte token | u8 address length | address | zeros.
// Peer hello: "WSYNCHC1" | token | u32 rank | u32 world. Root answers one byte, 0 = accepted.
// Each broadcast: u64 sequence | u64 byte count | payload.
// The warm-up all-reduce (one float32, SUM): each peer sends its 4 bytes to the root, which adds
// them to its own zero and broadcasts the 4-byte sum as the next broadcast.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu_seam.h"
#include "common/net.h"

namespace wsync {

inline constexpr size_t kUniqueIdBytes = 128;

struct HostCollectiveId {
  std::string address;
  uint16_t port = 0;
  std::string token;  // 16 bytes

  std::string Encode() const;
  static absl::StatusOr<HostCollectiveId> Decode(absl::string_view bytes);
};

class HostRootCommunicator final : public RootCommunicator {
 public:
  // Listens on bind_address (all interfaces when empty) and advertises advertise_address.
  static absl::StatusOr<std::unique_ptr<HostRootCommunicator>> Create(
      const std::string& bind_address, const std::string& advertise_address, int world_size);
  ~HostRootCommunicator() override;

  const std::string& unique_id() const override { return unique_id_; }
  int world_size() const override { return world_size_; }
  absl::StatusOr<uint64_t> StartBroadcastFrom(SlotMemory& slot, const void* base,
                                              const std::vector<BroadcastPiece>& pieces,
                                              absl::Time deadline) override;
  absl::StatusOr<WireTiming> WaitBroadcast(uint64_t ticket, absl::Time deadline) override;
  absl::Status WarmUpAllReduce(absl::Time deadline) override;
  void Abort(absl::string_view reason) override;
  std::string Describe() const override;
  // Added to Describe (set before the communicator is shared).
  void set_note(std::string note) { note_ = std::move(note); }

  // Ranks that have joined so far.
  std::vector<int> JoinedRanks() const;

 private:
  HostRootCommunicator(UniqueFd listen_fd, int world_size, std::string unique_id,
                       std::string token);
  // What the sender thread works through, in ticket order, as an NCCL stream would.
  struct Job {
    uint64_t ticket;
    std::vector<std::pair<const char*, uint64_t>> pieces;
    absl::Time deadline;
  };
  void AcceptLoop();
  void SendLoop();
  void Handshake(UniqueFd fd);
  absl::Status WaitForPeers(absl::Time deadline);
  absl::Status SendToAll(const char* data, uint64_t bytes, absl::Time deadline);

  UniqueFd listen_fd_;
  const int world_size_;
  const std::string unique_id_;
  const std::string token_;
  std::string note_;  // see set_note
  std::thread accept_thread_;

  mutable std::mutex mu_;
  std::condition_variable joined_cv_;
  std::map<int, UniqueFd> peers_;  // rank -> socket
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by mu_, even where aborted_ is read without it
  uint64_t sequence_ = 0;

  std::thread send_thread_;
  std::condition_variable jobs_cv_;  // guarded by mu_, like the fields below
  std::deque<Job> jobs_;
  std::map<uint64_t, absl::StatusOr<WireTiming>> done_;
  std::set<uint64_t> unwaited_;  // tickets issued and not yet waited
  uint64_t next_ticket_ = 0;
  absl::Time last_end_ = absl::InfinitePast();
  bool stopping_ = false;
  float warm_up_sum_ = 0;  // the all-reduce's result, broadcast from here
};

// An engine rank's side, used by the engine simulators.
class HostCollectivePeer {
 public:
  static absl::StatusOr<std::unique_ptr<HostCollectivePeer>> Join(absl::string_view unique_id,
                                                                  int rank, int world_size,
                                                                  absl::Time deadline);
  // Receives one broadcast of exactly `bytes` bytes.
  absl::Status Receive(void* dst, uint64_t bytes, absl::Time deadline);
  // Receives one broadcast whose bytes fill `pieces` back to back, in order (a flattened bucket
  // landing in its tensors' own storage); its byte count must be the pieces' total.
  absl::Status ReceiveScattered(const std::vector<iovec>& pieces, absl::Time deadline);
  // The warm-up all-reduce's peer side: sends `value`, returns the sum of every rank's.
  absl::StatusOr<float> AllReduceSum(float value, absl::Time deadline);
  // Receives the first `partial` bytes of a broadcast of `bytes` and stops (fault injection).
  absl::Status ReceivePartial(void* dst, uint64_t bytes, uint64_t partial, absl::Time deadline);
  int rank() const { return rank_; }
  // Ends the connection: a receive blocked in another thread returns an error, and so does every
  // later one.
  void Shutdown();

 private:
  HostCollectivePeer(UniqueFd fd, int rank) : fd_(std::move(fd)), rank_(rank) {}
  absl::Status ReadHeader(uint64_t bytes, absl::Time deadline);
  UniqueFd fd_;
  int rank_;
  uint64_t expected_sequence_ = 0;
};

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_HOST_COLLECTIVE_H_
