#ifndef WSYNC_DAEMON_SERVICE_STATUS_MAPPING_H_
#define WSYNC_DAEMON_SERVICE_STATUS_MAPPING_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace wsync {

// absl and gRPC share google.rpc.Code numbering; the message travels unchanged.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_STATUS_MAPPING_H_
