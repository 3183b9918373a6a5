#include "tests/sim/tcp_store_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

constexpr absl::Duration kReplyTimeout = absl::Seconds(30);

void U8(std::string* s, uint8_t v) { s->push_back(static_cast<char>(v)); }
void U64(std::string* s, uint64_t v) { s->append(reinterpret_cast<char*>(&v), 8); }
void Str(std::string* s, const std::string& v) {
  U64(s, v.size());
  s->append(v);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host,
                                                                        uint16_t port, uint32_t pid,
                                                                        absl::Time deadline,
                                                                        bool register_init) {
  WSYNC_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(host, port, deadline));
  auto client = std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(fd)));
  std::string validate;
  U8(&validate, 0);
  uint32_t magic = 0x3C85F7CE;
  validate.append(reinterpret_cast<char*>(&magic), 4);
  WSYNC_RETURN_IF_ERROR(client->Send(validate));
  WSYNC_ASSIGN_OR_RETURN(uint32_t echoed, client->Ping(pid));
  if (echoed != pid) return absl::DataLossError("store echoed a different PING nonce");
  if (register_init) WSYNC_RETURN_IF_ERROR(client->Add("init/", 1).status());
  return client;
}

absl::Status TcpStoreClient::Send(const std::string& bytes) {
  return WriteAll(fd_.get(), bytes.data(), bytes.size(), absl::Now() + kReplyTimeout);
}

absl::StatusOr<std::string> TcpStoreClient::ReadBytes() {
  uint64_t n = 0;
  WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), &n, 8, absl::Now() + kReplyTimeout));
  std::string v(n, '\0');
  if (n > 0) WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), v.data(), n, absl::Now() + kReplyTimeout));
  return v;
}

absl::StatusOr<uint32_t> TcpStoreClient::Ping(uint32_t nonce) {
  std::string req;
  U8(&req, 13);
  req.append(reinterpret_cast<char*>(&nonce), 4);
  WSYNC_RETURN_IF_ERROR(Send(req));
  uint32_t echo = 0;
  WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), &echo, 4, absl::Now() + kReplyTimeout));
  return echo;
}

absl::Status TcpStoreClient::Set(const std::string& key, const std::string& value) {
  std::string req;
  U8(&req, 1);
  Str(&req, key);
  Str(&req, value);
  return Send(req);
}

absl::StatusOr<std::string> TcpStoreClient::Get(const std::string& key) {
  std::string req;
  U8(&req, 3);
  Str(&req, key);
  WSYNC_RETURN_IF_ERROR(Send(req));
  return ReadBytes();
}

absl::StatusOr<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta) {
  std::string req;
  U8(&req, 4);
  Str(&req, key);
  req.append(reinterpret_cast<char*>(&delta), 8);
  WSYNC_RETURN_IF_ERROR(Send(req));
  int64_t v = 0;
  WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), &v, 8, absl::Now() + kReplyTimeout));
  return v;
}

absl::StatusOr<bool> TcpStoreClient::Check(const std::vector<std::string>& keys) {
  std::string req;
  U8(&req, 5);
  U64(&req, keys.size());
  for (const auto& k : keys) Str(&req, k);
  WSYNC_RETURN_IF_ERROR(Send(req));
  uint8_t r = 1;
  WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), &r, 1, absl::Now() + kReplyTimeout));
  return r == 0;
}

absl::Status TcpStoreClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  std::string req;
  U8(&req, 6);
  U64(&req, keys.size());
  for (const auto& k : keys) Str(&req, k);
  WSYNC_RETURN_IF_ERROR(Send(req));
  uint8_t r = 0xff;
  absl::Status s = ReadExact(fd_.get(), &r, 1, absl::Now() + timeout);
  if (s.ok()) return r == 0 ? absl::OkStatus() : absl::DataLossError("unexpected WAIT reply");
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  std::string cancel;
  U8(&cancel, 12);
  WSYNC_RETURN_IF_ERROR(Send(cancel));
  WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), &r, 1, absl::Now() + kReplyTimeout));
  if (r == 0) {  // STOP_WAITING raced the cancel; WAIT_CANCELED follows
    WSYNC_RETURN_IF_ERROR(ReadExact(fd_.get(), &r, 1, absl::Now() + kReplyTimeout));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("store WAIT for ", keys.size(), " key(s) timed out"));
}

}  // namespace wsync
