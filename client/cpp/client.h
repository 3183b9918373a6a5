#ifndef WSYNC_CLIENT_CPP_CLIENT_H_
#define WSYNC_CLIENT_CPP_CLIENT_H_

// The trainer-side C++ client of wsyncd.
//
//   auto client = wsync::Client::Connect("unix:/run/wsync/wsyncd.sock");
//   (*client)->OpenSession(/*device=*/0, "trainer rank 0");
//   auto result = (*client)->Push("policy", "step-100", tensors);

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/push_stream.h"
#include "client/cpp/update_stream.h"
#include "common/dtype.h"
#include "common/gpu_seam.h"
#include "common/host/host_source.h"
#include "wsync/v1/admin.grpc.pb.h"
#include "wsync/v1/trainer.grpc.pb.h"

namespace wsync {

// How to reach wsyncd over TCP, which it serves with TLS and tokens (the unix socket needs
// neither: the kernel tells wsyncd who connected).
struct ConnectOptions {
  absl::Duration timeout = absl::Seconds(5);
  // PEM file of the CA that signed wsyncd's certificate; empty: plain TCP (a daemon started
  // with --insecure-listen).
  std::string tls_ca_file;
  // File holding the trainer or admin token, sent as "authorization: Bearer <token>".
  std::string token_file;
  // Overrides the name the certificate is checked against (default: the target's host).
  std::string tls_server_name;

  // WSYNC_TLS_CA, WSYNC_TOKEN_FILE and WSYNC_TLS_SERVER_NAME from the environment.
  static ConnectOptions FromEnvironment(absl::Duration timeout = absl::Seconds(5));
};

class Client {
 public:
  // target: "unix:/path/to.sock" or "host:port". Fails with a clear message if no daemon answers.
  // TCP targets take their TLS and token settings from the environment (ConnectOptions).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         absl::Duration timeout = absl::Seconds(5));
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         const ConnectOptions& options);
  static std::unique_ptr<Client> FromChannel(std::shared_ptr<grpc::Channel> channel);
  ~Client();

  // Leases the device's slots and maps them; keeps the lease alive in the background.
  absl::Status OpenSession(int device, const std::string& client_name);
  absl::Status CloseSession();
  // Pull mode: has wsyncd close its mappings of this process's memory, which otherwise last the
  // session, so that memory may be freed. Returns how many allocations were mapped.
  absl::StatusOr<uint32_t> ReleaseSources();
  // A group of this session's own, for engines the trainer started (Trainer.DeclareGroup):
  // `group_json` is a "groups" entry of wsyncd's config file. Declaring it again as it is does
  // nothing; with other engines or options it forms anew, between updates. It ends with the
  // session. Returns whether it formed now.
  absl::StatusOr<bool> DeclareGroup(const std::string& group_json);
  // Ends a group this session declared.
  absl::Status ForgetGroup(const std::string& name);

  // Starts an update fed tensor by tensor (see PushStream).
  absl::StatusOr<std::unique_ptr<PushStream>> BeginPush(const std::string& group,
                                                        const std::string& version,
                                                        PushOptions options = {});
  // Plans buckets (order kept; a tensor larger than a slot is refused before anything is sent;
  // the group's bucket rules from UpdateStarted obeyed; the final bucket marked last), fills free
  // slots while earlier buckets are on the wire, commits, and returns per-engine results.
  absl::StatusOr<PushResult> Push(const std::string& group, const std::string& version,
                                  const std::vector<TensorRef>& tensors,
                                  const std::function<void(const PushProgress&)>& progress = {});

  // Host mode, pull mode: a shared-memory arena for tensors that wsyncd may read for this session
  // (named with the tag wsyncd gave it; wsyncd reads no other segment for it). Place tensors in it
  // and push them with PushOptions.pull. FAILED_PRECONDITION without an open session.
  absl::StatusOr<std::unique_ptr<HostSourceArena>> NewSourceArena(uint64_t bytes) const;

  const std::string& session_id() const { return session_id_; }
  // What names this session's pull sources (OpenSessionResponse.source_tag).
  const std::string& source_tag() const { return source_tag_; }
  uint64_t slot_bytes() const;
  size_t slot_count() const { return slots_.size(); }
  MappedSlot* slot(size_t i) { return slots_[i].get(); }
  // The session's oversize slot with room for `bytes` (asks the daemon and maps it on first need,
  // or when a larger one is needed).
  absl::StatusOr<std::pair<uint32_t, MappedSlot*>> OversizeSlot(uint64_t bytes);
  v1::Trainer::Stub* trainer() { return trainer_.get(); }
  v1::Admin::Stub* admin() { return admin_.get(); }
  // The connection itself, for stubs of other services (grpc.health.v1).
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  explicit Client(std::shared_ptr<grpc::Channel> channel);
  void StopKeepAlive();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Trainer::Stub> trainer_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::string session_id_;
  std::string source_tag_;
  std::vector<std::unique_ptr<MappedSlot>> slots_;
  int device_ = 0;
  bool checksums_ = true;                     // the daemon asks for CRC-32 per bucket
  std::unique_ptr<SourceExporter> exporter_;  // pull mode: finds the tensors' allocations
  std::unique_ptr<MappedSlot> oversize_;
  uint32_t oversize_index_ = 0;
  // Holds the session open (HoldSession) for the session's life, so that wsyncd frees its slots
  // at once if this process dies; renews the lease with KeepAlive where the daemon has no hold.
  std::thread keepalive_;
  std::atomic<bool> keepalive_stop_{false};
  std::mutex hold_mu_;
  grpc::ClientContext* hold_ = nullptr;  // the open hold call, cancelled by StopKeepAlive
  void KeepSessionAlive(std::string session_id, absl::Duration period);
};

// Maps a slot the daemon announced (shared memory; CUDA IPC in CUDA builds) as its region of the
// allocation it names, which this process maps once however many slots and clients view it.
absl::StatusOr<std::unique_ptr<MappedSlot>> MapSlot(const v1::SlotInfo& info, int device);

}  // namespace wsync

#endif  // WSYNC_CLIENT_CPP_CLIENT_H_
