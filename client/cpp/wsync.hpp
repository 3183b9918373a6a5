#ifndef WSYNC_CLIENT_CPP_WSYNC_HPP_
#define WSYNC_CLIENT_CPP_WSYNC_HPP_

// The wsync client for C++ code outside this tree: a header-only layer over the C ABI
// (wsync_c.h, libwsync_client.so), installed with the CMake package (find_package(wsync), target
// wsync::client). It needs none of wsync's dependencies to build: errors are exceptions, handles
// are owned, and a push's result comes back as the daemon's JSON text.
//
//   wsync::Client client("unix:/run/wsync/wsyncd.sock");
//   client.OpenSession(/*device=*/0, "my trainer");
//   std::vector<wsync_tensor> tensors = ...;  // name, dtype ("bfloat16"), shape, data, nbytes
//   std::string result = client.Push("policy", "step-42", tensors);

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "wsync/wsync_c.h"

namespace wsync {

// A failed call: the google.rpc.Code the daemon or client returned, and its message.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Client {
 public:
  // Connects to wsyncd at `target` ("unix:/path" or "host:port"), waiting up to `timeout_s`.
  explicit Client(const std::string& target, double timeout_s = 10.0) {
    char err[1024] = {0};
    if (int rc = wsync_connect(target.c_str(), timeout_s, &client_, err, sizeof(err)); rc != 0) {
      throw Error(rc, err);
    }
  }
  ~Client() {
    if (client_ != nullptr) wsync_close(client_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  static std::string Version() { return wsync_version(); }

  // Takes `device`'s slots for this process until CloseSession (or the client's end).
  void OpenSession(int32_t device, const std::string& name) {
    Check([&](char* err, size_t len) {
      return wsync_open_session(client_, device, name.c_str(), err, len);
    });
  }
  void CloseSession() {
    Check([&](char* err, size_t len) { return wsync_close_session(client_, err, len); });
  }
  uint64_t SlotBytes() const { return wsync_slot_bytes(client_); }

  // Pushes `tensors` as version `version` of `group`; returns the daemon's result as JSON
  // ({"update_id", "buckets", "bytes", "seconds", "engines": [...], ...}).
  std::string Push(const std::string& group, const std::string& version,
                   const std::vector<wsync_tensor>& tensors) {
    char* result = nullptr;
    Check([&](char* err, size_t len) {
      return wsync_push(client_, group.c_str(), version.c_str(), tensors.data(), tensors.size(),
                        nullptr, nullptr, &result, err, len);
    });
    std::string out = result != nullptr ? result : "";
    wsync_free_string(result);
    return out;
  }

 private:
  template <typename Call>
  static void Check(Call call) {
    char err[4096] = {0};
    if (int rc = call(err, sizeof(err)); rc != 0) throw Error(rc, err);
  }

  wsync_client* client_ = nullptr;
};

}  // namespace wsync

#endif  // WSYNC_CLIENT_CPP_WSYNC_HPP_
