#ifndef WSYNC_DAEMON_TRANSPORT_BROADCAST_TORCH_STORE_RENDEZVOUS_H_
#define WSYNC_DAEMON_TRANSPORT_BROADCAST_TORCH_STORE_RENDEZVOUS_H_

#include <memory>
#include <set>
#include <string>

#include "daemon/rendezvous/tcp_store_server.h"
#include "daemon/transport/broadcast/rendezvous_strategy.h"

namespace wsync {

// torch's own rendezvous, as SGLang and LMDeploy engines use it: wsyncd serves a TCPStore on a
// fresh port per group instance and writes rank 0's ncclUniqueId under the key the engines'
// ProcessGroupNCCL reads (shared/docs/tcpstore-protocol.md); each engine rank's store client
// ADDs "init/" when it connects.
class TorchStoreRendezvous final : public RendezvousStrategy {
 public:
  // The store listens on bind_address ("" = the advertise address) and lets in only
  // `allowed_peers` (numeric IPs; empty = anyone).
  TorchStoreRendezvous(std::string bind_address, std::string advertise_address,
                       std::set<std::string> allowed_peers)
      : bind_address_(std::move(bind_address)),
        advertise_address_(std::move(advertise_address)),
        allowed_peers_(std::move(allowed_peers)) {}
  ~TorchStoreRendezvous() override { Close(); }

  absl::StatusOr<Rendezvous> Open(const std::string& group_name, const std::string& unique_id,
                                  uint32_t world_size) override;
  absl::Status WaitJoined(absl::Time deadline) override;
  std::string Diagnose() const override;
  absl::Status CheckJoined() const override;
  std::string address() const override;
  void Close() override;

  // The store key engines' ProcessGroupNCCL reads the id from ("/G/G//cuda//0").
  static std::string UniqueIdKey(const std::string& group_name);

 private:
  const std::string bind_address_;
  const std::string advertise_address_;
  const std::set<std::string> allowed_peers_;
  std::string group_name_;
  uint32_t world_size_ = 0;
  std::unique_ptr<TcpStoreServer> store_;
  // The engine ranks' store connections that registered ("init/") when the group formed.
  std::vector<TcpStoreServer::Adder> members_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_BROADCAST_TORCH_STORE_RENDEZVOUS_H_
