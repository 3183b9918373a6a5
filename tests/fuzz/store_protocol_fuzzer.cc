// Fuzzes the TCPStore's request side as TcpStoreServer runs it: bytes arrive in pieces on a few
// connections, each connection's buffer is parsed with ParseStoreRequest and every whole frame is
// applied to one StoreState, with the daemon's own calls (Set, ErasePrefix, the queries) in
// between. Small limits make every limit reachable.
//
// Input: an optional 'P' (the store has the rank prefix "/g/": a connection becomes an engine
// rank by naming a key under it, not by ADDing "init/"), then records, each one op byte and its
// operands. op % 4 names the connection, (op / 4) % 8 the action:
//   0-3  bytes arrive on the connection: one length byte n, then n bytes (the connection opens
//        again if it was closed);
//   4    the client closes the connection;
//   5    the daemon sets a key: length byte, key, length byte, value;
//   6    the daemon erases a prefix: length byte, prefix;
//   7    the daemon asks what it asks of clients (InitCount, pids, adders, fetchers, waits).
//
// Invariants: a frame is complete only once every byte of it has arrived, and until then the
// parser asks for no more than the frame (the server waits for `need` bytes: asking for more
// would hang a client); no request exceeds a limit; no reply exceeds max_reply_bytes; the data
// the store holds stays within max_data_bytes and its count of them is exact (it returns to zero
// when everything is erased); woken and registered connections are open ones, and no more
// connections are registered than the group has engine ranks; a connection is a rank only if it
// named a key under the rank prefix (with one) or ADDed 1 to "init/" (without); only a rank reads
// a value the daemon published; keys the daemon set keep its values.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/rendezvous/store_protocol.h"
#include "daemon/rendezvous/store_state.h"
#include "tests/fuzz/fuzz_check.h"

namespace wsync {
namespace {

constexpr int kConnections = 4;
// Fewer than the connections, so that a registration past the group's ranks is reachable.
constexpr size_t kMaxRegistered = 2;

StoreLimits FuzzLimits() {
  StoreLimits l;
  l.max_key_bytes = 64;
  l.max_value_bytes = 256;
  l.max_keys_per_request = 16;
  l.max_request_bytes = 1024;
  // A GET or COMPARE_SET reply is 8 + one value; MULTI_GET is checked against the cap.
  l.max_reply_bytes = 512;
  l.max_data_bytes = 2048;
  return l;
}

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return empty() ? 0 : data_[pos_++]; }
  // A length byte and up to that many bytes.
  std::string Bytes() {
    const size_t n = Byte();
    const size_t take = std::min(n, size_ - std::min(pos_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + pos_), take);
    pos_ += take;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr char kRankPrefix[] = "/g/";

struct Connection {
  bool open = false;
  bool validated = false;
  uint64_t serial = 0;
  std::string in;
  bool named_group = false;  // a request of it named a key under the rank prefix
  bool announced = false;    // it ADDed 1 to "init/"
};

class Harness {
 public:
  explicit Harness(bool rank_prefix) : limits_(FuzzLimits()), state_(limits_) {
    state_.set_max_registered(kMaxRegistered);
    if (rank_prefix) state_.set_rank_prefix(kRankPrefix);
    rank_prefix_ = rank_prefix;
  }

  void Run(Input& input) {
    while (!input.empty()) {
      const uint8_t op = input.Byte();
      Connection& c = connections_[op % kConnections];
      switch ((op / kConnections) % 8) {
        case 4:
          Close(c);
          break;
        case 5: {
          std::string key = input.Bytes();
          std::string value = input.Bytes();
          if (key.size() > limits_.max_key_bytes) key.resize(limits_.max_key_bytes);
          // The daemon's values obey the value limit (it sets the 128-byte id).
          if (state_.Set(key, value).ok()) published_[key] = std::move(value);
          CheckHeld();
          TakeWoken();
          break;
        }
        case 6: {
          const size_t before = state_.data_bytes();
          const std::string prefix = input.Bytes();
          (void)state_.ErasePrefix(prefix);
          std::erase_if(published_, [&](const auto& kv) { return kv.first.starts_with(prefix); });
          FUZZ_CHECK(state_.data_bytes() <= before, "erasing added bytes");
          break;
        }
        case 7:
          Queries();
          break;
        default:
          if (!c.open) Open(c);
          c.in += input.Bytes();
          Serve(c);
          break;
      }
    }
    Queries();
    for (Connection& c : connections_) Close(c);
    // Everything erased leaves nothing counted: the store's count of its bytes never drifts.
    state_.ErasePrefix("");
    FUZZ_CHECK(state_.data_bytes() == 0, absl::StrCat(state_.data_bytes(), " bytes left"));
    FUZZ_CHECK(state_.connections_open() == 0, "connections left open");
  }

 private:
  void Open(Connection& c) {
    c = Connection{true, false, next_serial_++, "", false, false};
    state_.Open(c.serial);
  }

  void Close(Connection& c) {
    if (!c.open) return;
    state_.Close(c.serial);
    FUZZ_CHECK(!state_.ConnectionOpen(c.serial), "closed connection still open");
    c.open = false;
  }

  // TcpStoreServer::ServeBuffered, without sockets.
  void Serve(Connection& c) {
    if (!c.validated && !c.in.empty() && c.in[0] != static_cast<char>(StoreCommand::kValidate)) {
      Close(c);
      return;
    }
    while (!c.in.empty()) {
      StoreParse p = ParseStoreRequest(c.in, limits_);
      if (p.kind == StoreParse::kNeedMore) {
        FUZZ_CHECK(p.need > c.in.size(), absl::StrCat("need ", p.need, " of ", c.in.size()));
        FUZZ_CHECK(p.need <= 1 + limits_.max_request_bytes, absl::StrCat("need ", p.need));
        return;
      }
      if (p.kind == StoreParse::kMalformed) {
        FUZZ_CHECK(!p.error.empty(), "malformed without a reason");
        Close(c);
        return;
      }
      FUZZ_CHECK(p.consumed >= 1 && p.consumed <= c.in.size(), absl::StrCat(p.consumed));
      FUZZ_CHECK(p.consumed <= 1 + limits_.max_request_bytes, absl::StrCat(p.consumed));
      CheckWithinLimits(p.request);
      CheckPrefixesNeedMore(absl::string_view(c.in).substr(0, p.consumed));
      c.in.erase(0, p.consumed);
      StoreState::Outcome o = state_.Apply(c.serial, p.request);
      FUZZ_CHECK(o.reply.size() <= limits_.max_reply_bytes,
                 absl::StrCat("reply of ", o.reply.size(), " bytes"));
      CheckHeld();
      CheckPublished();
      if (!o.error.empty()) {
        FUZZ_CHECK(o.reply.empty(), "a reply with an error");
        Close(c);
        return;
      }
      c.validated = true;
      CheckRank(c, p.request);
      TakeWoken();
    }
  }

  void CheckWithinLimits(const StoreRequest& r) {
    FUZZ_CHECK(r.keys.size() <= limits_.max_keys_per_request, absl::StrCat(r.keys.size()));
    for (const std::string& k : r.keys) {
      FUZZ_CHECK(k.size() <= limits_.max_key_bytes, absl::StrCat("key of ", k.size()));
    }
    for (const std::string& v : r.values) {
      FUZZ_CHECK(v.size() <= limits_.max_value_bytes, absl::StrCat("value of ", v.size()));
    }
    switch (r.command) {
      case StoreCommand::kSet:
      case StoreCommand::kAppend:
        FUZZ_CHECK(r.keys.size() == 1 && r.values.size() == 1, "SET/APPEND shape");
        break;
      case StoreCommand::kCompareSet:
        FUZZ_CHECK(r.keys.size() == 1 && r.values.size() == 2, "COMPARE_SET shape");
        break;
      case StoreCommand::kGet:
      case StoreCommand::kAdd:
      case StoreCommand::kDeleteKey:
        FUZZ_CHECK(r.keys.size() == 1 && r.values.empty(), "one-key shape");
        break;
      case StoreCommand::kMultiSet:
        FUZZ_CHECK(r.keys.size() == r.values.size(), "MULTI_SET shape");
        break;
      default:
        FUZZ_CHECK(r.values.empty(), "values on a command without any");
        break;
    }
  }

  // A whole frame, cut anywhere before its end, is incomplete and asks for at most the frame.
  void CheckPrefixesNeedMore(absl::string_view frame) {
    for (size_t cut : {frame.size() - 1, frame.size() / 2, size_t{1}}) {
      if (cut >= frame.size()) continue;
      StoreParse q = ParseStoreRequest(frame.substr(0, cut), limits_);
      FUZZ_CHECK(q.kind == StoreParse::kNeedMore,
                 absl::StrCat("prefix of ", cut, "/", frame.size(), " is kind ", q.kind));
      FUZZ_CHECK(q.need > cut && q.need <= frame.size(),
                 absl::StrCat("prefix of ", cut, "/", frame.size(), " needs ", q.need));
    }
  }

  // Who is a rank, and what only a rank reads (the request was served).
  void CheckRank(Connection& c, const StoreRequest& r) {
    for (const std::string& k : r.keys) {
      if (rank_prefix_ && k.starts_with(kRankPrefix)) c.named_group = true;
    }
    if (r.command == StoreCommand::kAdd && r.keys[0] == StoreState::kInitKey) c.announced = true;
    const bool rank = state_.Registered(c.serial);
    FUZZ_CHECK(!rank || (rank_prefix_ ? c.named_group : c.announced),
               "a rank that neither named the group nor (without a prefix) ADDed \"init/\"");
    if (r.command == StoreCommand::kGet || r.command == StoreCommand::kMultiGet) {
      for (const std::string& k : r.keys) {
        FUZZ_CHECK(rank || published_.count(k) == 0,
                   absl::StrCat("a connection that is no rank read published key ", k));
      }
    }
    FUZZ_CHECK(!state_.Holds(c.serial) || rank || (rank_prefix_ && c.announced),
               "a connection held that is neither a rank nor announced");
  }

  void CheckHeld() {
    FUZZ_CHECK(state_.data_bytes() <= limits_.max_data_bytes,
               absl::StrCat(state_.data_bytes(), " bytes held"));
  }

  // What the daemon published (the NCCL id) stays as it set it, whatever clients send.
  void CheckPublished() {
    for (const auto& [key, value] : published_) {
      FUZZ_CHECK(state_.Get(key) == value, absl::StrCat("a client changed published key ", key));
    }
  }

  void TakeWoken() {
    for (uint64_t w : state_.TakeWoken()) {
      FUZZ_CHECK(state_.ConnectionOpen(w), absl::StrCat("woke closed connection ", w));
    }
  }

  void Queries() {
    (void)state_.InitCount();
    FUZZ_CHECK(static_cast<int>(state_.ConnectedPids().size()) <= state_.connections_open(),
               "more pids than connections");
    for (const StoreState::Adder& a : state_.AddersOf(StoreState::kInitKey)) {
      FUZZ_CHECK(state_.ConnectionOpen(a.connection), "a closed connection registered");
    }
    (void)state_.FetchersOf("/g/g//cuda//0");
    FUZZ_CHECK(state_.UnpublishedWaits().size() <= 64, "unbounded waits kept");
    size_t registered = 0;
    for (const Connection& c : connections_) {
      if (c.open && state_.Registered(c.serial)) ++registered;
    }
    FUZZ_CHECK(registered == state_.registered_open(), "registered connections miscounted");
    FUZZ_CHECK(registered <= kMaxRegistered, absl::StrCat(registered, " registered"));
    FUZZ_CHECK(state_.RanksLeft().size() <= 64, "unbounded ranks that left kept");
  }

  const StoreLimits limits_;
  StoreState state_;
  bool rank_prefix_ = false;
  std::map<std::string, std::string> published_;  // key -> value, as the daemon set them
  Connection connections_[kConnections];
  uint64_t next_serial_ = 1;
};

}  // namespace
}  // namespace wsync

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool rank_prefix = size > 0 && data[0] == 'P';
  wsync::Input input(data + (rank_prefix ? 1 : 0), size - (rank_prefix ? 1 : 0));
  wsync::Harness harness(rank_prefix);
  harness.Run(input);
  return 0;
}
