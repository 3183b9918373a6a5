#ifndef WSYNC_TESTS_RENDEZVOUS_STORE_WIRE_H_
#define WSYNC_TESTS_RENDEZVOUS_STORE_WIRE_H_

// Raw TCPStore frames and a raw client socket, for byte-exact store tests.

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "gtest/gtest.h"

namespace wsync {

inline std::string Hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size();) {
    if (hex[i] == ' ') {
      ++i;
      continue;
    }
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    i += 2;
  }
  return out;
}

inline std::string U64(uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }
inline std::string Str(const std::string& s) { return U64(s.size()) + s; }

class RawConn {
 public:
  RawConn() = default;
  explicit RawConn(uint16_t port) {
    auto fd = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(fd.ok());
    fd_ = std::move(*fd);
  }
  void Send(const std::string& bytes) {
    ASSERT_TRUE(
        WriteAll(fd_.get(), bytes.data(), bytes.size(), absl::Now() + absl::Seconds(5)).ok());
  }
  // For a connection the server may already have closed: whether the bytes go out or meet a
  // closed socket, the test goes on.
  bool TrySend(const std::string& bytes) {
    return WriteAll(fd_.get(), bytes.data(), bytes.size(), absl::Now() + absl::Seconds(5)).ok();
  }
  void SendBytewise(const std::string& bytes) {
    for (char c : bytes) {
      Send(std::string(1, c));
      absl::SleepFor(absl::Microseconds(200));
    }
  }
  std::string Read(size_t n, absl::Duration timeout = absl::Seconds(5)) {
    std::string out(n, '\0');
    absl::Status s = ReadExact(fd_.get(), out.data(), n, absl::Now() + timeout);
    return s.ok() ? out : absl::StrCat("<", s.ToString(), ">");
  }
  // True if the server closed the connection (EOF) within the timeout.
  bool Closed(absl::Duration timeout = absl::Seconds(3)) {
    char c;
    absl::Status s = ReadExact(fd_.get(), &c, 1, absl::Now() + timeout);
    return s.code() == absl::StatusCode::kUnavailable;
  }
  void Validate() { Send(Hex("00 ce f7 85 3c")); }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_RENDEZVOUS_STORE_WIRE_H_
