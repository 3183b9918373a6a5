#ifndef WSYNC_TESTS_SIM_TCP_STORE_CLIENT_H_
#define WSYNC_TESTS_SIM_TCP_STORE_CLIENT_H_

// A TCPStore client that sends what torch's c10d client sends (VALIDATE, PING, ADD "init/", WAIT +
// GET), so the engine simulators meet wsyncd's store the way real engine ranks do.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net.h"

namespace wsync {

class TcpStoreClient {
 public:
  // Connects, validates, pings with `pid` and, like a torch client built with a world size,
  // registers with ADD "init/" 1.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host,
                                                                 uint16_t port, uint32_t pid,
                                                                 absl::Time deadline,
                                                                 bool register_init = true);
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys);
  // WAIT; on timeout sends CANCEL_WAIT as torch does and returns DEADLINE_EXCEEDED.
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout);
  absl::StatusOr<uint32_t> Ping(uint32_t nonce);
  int fd() const { return fd_.get(); }

 private:
  explicit TcpStoreClient(UniqueFd fd) : fd_(std::move(fd)) {}
  absl::Status Send(const std::string& bytes);
  absl::StatusOr<std::string> ReadBytes();
  UniqueFd fd_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SIM_TCP_STORE_CLIENT_H_
