#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_TORCH_STORE_RENDEZVOUS_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_TORCH_STORE_RENDEZVOUS_H_

#include <memory>
#include <set>
#include <string>

#include "daemon/rendezvous/tcp_store_server.h"
#include "daemon/transport/broadcast/rendezvous_strategy.h"
#include "daemon/transport/broadcast/store_rank_gate.h"

namespace wsync {

// A rendezvous over torch's TCPStore, served by wsyncd on a fresh port per group instance, in
// one of two layouts (mode):
//  kTorchStore          SGLang and LMDeploy: each engine rank's ProcessGroupNCCL reads rank 0's
//                       raw ncclUniqueId under "/G/G//cuda//0" (docs/engines/tcpstore.md).
//  kStatelessStore  vLLM: each worker's StatelessProcessGroup reads broadcast_obj's first
//                       object, "/broadcast_from/0/0", a pickle of vLLM's ctypes ncclUniqueId
//                       (docs/engines/tcpstore.md). Its counter restarts at 0 in every new group,
//                       which the fresh store per instance keeps from reading a stale id.
// Each engine rank's store client ADDs "init/" when it connects, in both layouts; so can any
// local process. In kTorchStore every key of the group is under "/G/", G the engine group's name,
// which holds a secret token (EngineGroupName): the store admits a connection as an engine rank
// only once it names such a key, so a stranger can neither take a rank's place nor read the id.
// vLLM's keys name no group, so there a StoreRankGate judges each connection as it opens: one from
// this host is let in only from an engine's own process tree (docs/RELIABILITY.md).
class TorchStoreRendezvous final : public RendezvousStrategy {
 public:
  // The store listens on bind_address ("" = the advertise address) and lets in only
  // `allowed_peers` (numeric IPs; empty = anyone). It never takes a port of `avoid_ports` (an
  // earlier wsyncd's stores for this group), nor, in a later Open, the port of the one before:
  // an engine rank of an older group instance that still retries its store must find nothing
  // there rather than this instance's store.
  // `gate` (may be null) judges every connection before the store reads from it; it is
  // refreshed at each Open.
  TorchStoreRendezvous(RendezvousMode mode, std::string bind_address, std::string advertise_address,
                       std::set<std::string> allowed_peers, std::set<uint16_t> avoid_ports = {},
                       std::shared_ptr<StoreRankGate> gate = nullptr)
      : mode_(mode),
        bind_address_(std::move(bind_address)),
        advertise_address_(std::move(advertise_address)),
        allowed_peers_(std::move(allowed_peers)),
        avoid_ports_(std::move(avoid_ports)),
        gate_(std::move(gate)) {}
  ~TorchStoreRendezvous() override { Close(); }

  absl::StatusOr<Rendezvous> Open(const std::string& group_name, const std::string& unique_id,
                                  uint32_t world_size) override;
  absl::Status WaitJoined(absl::Time deadline) override;
  std::string Diagnose() const override;
  absl::Status CheckJoined() const override;
  std::string address() const override;
  void Close() override;
  RendezvousMode mode() const override { return mode_; }

  // The store key engines' ProcessGroupNCCL reads the id from ("/G/G//cuda//0").
  static std::string UniqueIdKey(const std::string& group_name);
  // The key vLLM's StatelessProcessGroup reads its first broadcast object from.
  static constexpr char kVllmIdKey[] = "/broadcast_from/0/0";
  // pickle.dumps of vLLM's ncclUniqueId holding `id` (128 bytes): _ctypes._unpickle(cls,
  // ({}, id)), the class named by its module path, which is part of the bytes.
  static absl::StatusOr<std::string> VllmUniqueIdPickle(absl::string_view id);

 private:
  // The key and value this layout publishes rank 0's id as.
  std::string IdKey() const;
  const RendezvousMode mode_;
  const std::string bind_address_;
  const std::string advertise_address_;
  const std::set<std::string> allowed_peers_;
  const std::set<uint16_t> avoid_ports_;
  const std::shared_ptr<StoreRankGate> gate_;
  uint16_t last_port_ = 0;  // the port of the store the last Close closed
  std::string group_name_;
  uint32_t world_size_ = 0;
  std::unique_ptr<TcpStoreServer> store_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_TORCH_STORE_RENDEZVOUS_H_
