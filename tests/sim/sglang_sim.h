#ifndef WSYNC_TESTS_SIM_SGLANG_SIM_H_
#define WSYNC_TESTS_SIM_SGLANG_SIM_H_

// An SGLang server as wsyncd sees it: the weight-update HTTP routes with SGLang's JSON and status
// codes, one receiver per TP rank (rank = rank_offset + tp_rank) that joins through the daemon's
// TCPStore exactly as torch does, and the flattened-bucket receive (one uint8 broadcast of the
// tensors' bytes back to back in `names` order, each tensor's byte range landing in that tensor's
// storage). Knobs inject faults.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tests/sim/sim_http_server.h"

namespace wsync {

class TcpStoreClient;
class HostCollectivePeer;

struct SimKnobs {
  bool fail_init = false;       // init_weights_update_group answers success=false (400)
  int init_delay_ms = 0;        // time init_weights_update_group waits before its ranks connect
  int fail_update_at = -1;      // the Nth update request (0-based) answers HTTP 500
  int hang_update_at = -1;      // the Nth update request never answers and never receives
  int die_at_update = -1;       // the process exits halfway through receiving the Nth bucket
  int answer_delay_ms = 0;      // time spent after receiving, as load_weights takes
  bool never_fetch_id = false;  // joins the store but never reads the id (the device_id hazard)
  // destroy_weights_update_group answers success=false and keeps the group: an engine whose
  // ranks are wedged in the old group's collective, which only a restart clears.
  bool fail_destroy = false;
  // POST /weights_checker {"action": "checksum"} answers each rank's checksums (SGLang's
  // {success, message, ranks: [{checksums, per_gpu_checksum, parallelism_info}]}); without it, 404.
  bool weights_checker = false;
  // TP rank 0 keeps this tensor with its first byte flipped when it receives it.
  std::string corrupt_tensor{};
  // Benchmark data-plane mode, as the torch simulator's: update requests are answered (after
  // answer_delay_ms) without receiving; POST /sim/receive_ahead posted the receives beforehand.
  bool data_plane = false;
  std::string version = "0.5.6";
  // A session build (docs/engines/sglang.md): POST /begin_weight_update {"selector"} and
  // /end_weight_update exist, and the scheduler asserts that every weight update sits inside one
  // and that no begin comes while one is open: the process dies otherwise, as SGLang's does.
  bool sessions = false;
  // The server serves no /openapi.json (--disable-fastapi-docs): 404 there.
  bool no_docs = false;
  // Oversized or trickled answers, by route.
  SimDeliveryKnobs delivery{};
};

class SglangSim {
 public:
  SglangSim(int tp_size, SimKnobs knobs);
  ~SglangSim();

  // Serves on host:port (port 0 picks one); returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

  nlohmann::json Checksums() const;
  int updates_received() const { return updates_.load(); }
  // The most requests that ever waited at once on one connection (arrived, not yet answered): 1
  // when the daemon waits for each answer, 2 or more when it pipelines the next update request
  // while the engine still works on the last.
  int max_waiting_requests() const { return server_ ? server_->max_waiting() : 0; }

 private:
  // Bytes that are not zeroed when allocated; capacity only grows, so a buffer reused for the
  // same tensor every update touches no fresh pages.
  class Bytes {
   public:
    uint8_t* data() { return data_.get(); }
    const uint8_t* data() const { return data_.get(); }
    uint64_t size() const { return size_; }
    void Resize(uint64_t n);
    void Swap(Bytes& other) noexcept;

   private:
    std::unique_ptr<uint8_t[]> data_;
    uint64_t size_ = 0;
    uint64_t capacity_ = 0;
  };
  // One tensor of a rank. A request's bytes land in `incoming` and become `held` only when the
  // whole request has arrived, so a failed request leaves the previous bytes, as SGLang loads
  // nothing from a failed broadcast. Both buffers persist: an update writes into mapped memory.
  // The checksum is the test's view, not engine work: it is taken from `held` when first asked
  // for, off the update's path, and describes the bytes the rank holds at that moment.
  struct Tensor {
    Bytes held;
    Bytes incoming;
    bool present = false;            // `held` was loaded by some request; guarded by mu_
    mutable bool crc_valid = false;  // `crc` matches `held`; guarded by mu_
    mutable uint32_t crc = 0;
  };
  struct Rank {
    ~Rank();  // waits for the receives posted ahead
    int tp_rank = 0;
    std::unique_ptr<TcpStoreClient> store;
    std::unique_ptr<HostCollectivePeer> peer;
    std::map<std::string, Tensor> tensors;  // insertion guarded by mu_
    Bytes scratch;                          // bytes a request must receive but does not keep
    std::thread ahead;                      // data-plane receives posted by /sim/receive_ahead
    std::vector<uint32_t> ahead_crcs;       // one per bucket received ahead (guarded by mu_)
  };
  struct Group {
    std::string name;
    std::string master_address;
    int master_port = 0;
    int world_size = 0;
    int rank_offset = 0;
    std::vector<std::unique_ptr<Rank>> ranks;
  };

  class UpdateTurn;
  void Routes();
  absl::Status InitGroup(const nlohmann::json& body);
  absl::Status ReceiveOnRank(Rank& rank, const nlohmann::json& body, int update_index);

  const int tp_size_;
  SimKnobs knobs_;
  std::unique_ptr<SimHttpServer> server_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> updates_{0};

  mutable std::mutex mu_;  // state below
  std::mutex update_mu_;   // SGLang serialises weight updates, in arrival order:
  std::condition_variable update_cv_;
  uint64_t next_ticket_ = 0;  // guarded by update_mu_
  uint64_t now_serving_ = 0;
  std::unique_ptr<Group> group_;
  std::string weight_version_ = "default";
  bool paused_ = false;
  bool session_open_ = false;
  // "begin <selector>", "end", and "update selector=<s>" for each bucket request, in order.
  std::vector<std::string> session_log_;
  std::vector<std::string> log_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SIM_SGLANG_SIM_H_
