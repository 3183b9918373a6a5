#ifndef WSYNC_TESTS_SIM_VLLM_NCCL_SIM_H_
#define WSYNC_TESTS_SIM_VLLM_NCCL_SIM_H_

// A vLLM server with the NCCL weight-transfer backend as wsyncd meets it (docs/engines/vllm.md
//, 4.6), over wsync's host collective: the dev-mode routes with vLLM's JSON, one worker
// per TP rank at rank_offset + tp_rank (one DP replica, one PP stage), and the receive each
// generation does:
//  - init_info and update_info are read as vLLM's dataclasses read them (Cls(**dict)): a key the
//    generation does not know fails the request with a 500 naming it, as does a rendezvous given
//    both ways or neither;
//  - the stateless-store rendezvous connects to the store, WAITs and GETs "/broadcast_from/0/0"
//    and unpickles _ctypes._unpickle(vllm...ncclUniqueId, ({}, 128 bytes)); the unique-id one
//    decodes standard base64 (URL-safe is refused) of exactly 128 bytes;
//  - every worker then runs the one-element float32 SUM all-reduce, and the init request answers
//    only after all have;
//  - unpacked, one broadcast per tensor in names order; packed, uint8 chunks cut after the tensor
//    that takes the running total past packed_buffer_size_bytes;
//  - session builds (>= 0.22.0) answer 409 to a start while one is open and to an update or a
//    finish outside one; >= 0.29.0 records finish's weight_version.
// /sim/checksums shows each rank's tensors, the calls in order and the chunk sizes received.

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "nlohmann/json.hpp"
#include "tests/sim/sim_http_server.h"

namespace wsync {

class TcpStoreClient;
class HostCollectivePeer;

struct VllmSimKnobs {
  std::string version = "0.30.0";
  int fail_update_at = -1;      // the Nth /update_weights (0-based) answers 500 without receiving
  int conflict_update_at = -1;  // the Nth /update_weights answers 409 without receiving
  // POST /weight_checker {"action": "checksum"} answers {"checksums": {key: hex}}, keyed as vLLM
  // keys them ("dp0:pp0:pcp0:tp<r>:ep0:<name>"), and 409 while paused; without it, 404.
  bool weight_checker = false;
  // The first worker keeps this tensor with its first byte flipped: weights that differ from the
  // trainer's and from every other engine's.
  std::string corrupt_tensor{};
  // Each init waits this long after reading its init_info, before the workers join (a slow
  // worker start); GET /sim/checksums shows the store port as soon as the request is read.
  int init_delay_ms = 0;
  // Oversized or trickled answers, by route.
  SimDeliveryKnobs delivery{};
};

class VllmNcclSim {
 public:
  VllmNcclSim(int tp_size, VllmSimKnobs knobs);
  ~VllmNcclSim();

  // Serves on host:port (port 0 picks one); returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();
  nlohmann::json Checksums() const;

 private:
  struct Rank {
    int rank = 0;
    std::unique_ptr<TcpStoreClient> store;  // held for the group's life, as vLLM's group does
    std::unique_ptr<HostCollectivePeer> peer;
    std::map<std::string, std::string> tensors;  // name -> bytes
  };
  struct Group {
    int world_size = 0;
    int rank_offset = 0;
    bool packed = false;  // from init_info (>= 0.28.0)
    uint64_t chunk_bytes = uint64_t{1} << 30;
    std::vector<std::unique_ptr<Rank>> ranks;
  };

  class Turn;
  void Routes();
  bool AtLeast(int major, int minor) const;
  absl::StatusOr<std::unique_ptr<Group>> Init(const nlohmann::json& info);
  absl::Status JoinRank(Rank& rank, const nlohmann::json& info, const std::string& unique_id,
                        int world_size);
  absl::Status ReceiveOnRank(Rank& rank, const std::vector<TensorEntry>& tensors, bool packed,
                             uint64_t chunk_bytes, std::vector<uint64_t>* chunks);

  const int tp_size_;
  const VllmSimKnobs knobs_;
  int major_ = 0;  // of knobs_.version, read once
  int minor_ = 0;
  std::unique_ptr<SimHttpServer> server_;
  std::atomic<int> updates_{0};

  mutable std::mutex mu_;  // state below
  // vLLM runs weight-transfer calls one at a time, in arrival order: a ticket each.
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  uint64_t next_ticket_ = 0;  // guarded by turn_mu_
  uint64_t now_serving_ = 0;
  std::unique_ptr<Group> group_;
  int inits_ = 0;
  int store_port_ = 0;  // master_port of the last init_info that named one
  bool paused_ = false;
  bool session_open_ = false;
  std::string weight_version_;
  std::vector<std::string> calls_;
  std::vector<uint64_t> last_chunks_;  // bytes per broadcast of the last update, rank offset's
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SIM_VLLM_NCCL_SIM_H_
