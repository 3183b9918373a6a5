#ifndef WSYNC_CLIENT_CPP_UPDATE_STREAM_H_
#define WSYNC_CLIENT_CPP_UPDATE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "wsync/v1/trainer.grpc.pb.h"

namespace wsync {

absl::Status FromGrpc(const grpc::Status& s);

// One update stream at the wire level: for tools and tests that need to send exactly what they
// choose (Push is built on it).
class UpdateStream {
 public:
  UpdateStream(v1::Trainer::Stub* stub, absl::Duration timeout);
  ~UpdateStream();
  // Sends begin and waits for Started (or the daemon's refusal). `tp_rank` (-1: not sent) is the
  // trainer rank's position among a colocated group's GPUs (BeginUpdate.tp_rank).
  absl::StatusOr<v1::UpdateStarted> Begin(const std::string& session_id, const std::string& group,
                                          const std::string& version, int tp_rank = -1);
  bool Send(const v1::UpdateRequest& request);
  bool SendBucket(const v1::Bucket& bucket);
  // Sends commit and half-closes.
  bool Commit();
  bool Abort(const std::string& reason);
  // Half-closes without committing (after the daemon has already ended the update).
  bool CloseWrites();
  // The next event; false once the stream has ended.
  bool Next(v1::UpdateEvent* event);
  // Cancels the call as a crashed trainer would.
  void Cancel();
  // The stream's final status (after Next returned false).
  absl::Status Finish();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::UpdateRequest, v1::UpdateEvent>> stream_;
  bool finished_ = false;
  absl::Status final_;
};

}  // namespace wsync

#endif  // WSYNC_CLIENT_CPP_UPDATE_STREAM_H_
