// Fuzzes what wsyncd reads from an engine's HTTP connection: the bytes of the answers to an
// update's pipelined bucket requests (UpdateChannel's reader, HttpMessageReader over Boost.Beast)
// and then its reading of each answer: the bucket reply check (EngineHttp::ExpectSuccess, as
// SglangAdapter::CheckBucketReply calls it) and the /get_server_info check of Probe.
//
// Input: one byte that picks how the bytes are split into reads, then the bytes the engine
// sends. The same bytes go to two readers, one in a single read and one in many small ones.
//
// Invariants: how the bytes are split into reads changes no message, and bytes that end between
// messages read without an error however they are split; no body exceeds the body limit; the bytes
// a reader keeps without completing a message stay within its header limit (else an engine could
// make wsyncd buffer without end); reading an answer never throws and is OK only for a 2xx status.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/engines/http_json.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/transport/http/http_message_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace wsync {
namespace {

using Reader = HttpMessageReader</*kRequest=*/false>;
constexpr uint64_t kBodyLimit = 4096;
constexpr uint32_t kHeaderLimit = 512;

struct Reading {
  absl::Status status;
  std::vector<Reader::Message> messages;
  bool idle = true;  // the bytes ended between messages
};

// Feeds `bytes` in reads of the sizes `split` picks (0: everything at once).
Reading Read(const std::string& bytes, uint8_t split) {
  Reading out;
  Reader reader(kBodyLimit, kHeaderLimit);
  size_t pos = 0;
  for (size_t i = 0; pos < bytes.size(); ++i) {
    size_t n = split == 0 ? bytes.size() : 1 + (split * (i + 1) * 31) % (split % 64 + 1);
    n = std::min(n, bytes.size() - pos);
    out.status = reader.Feed(bytes.data() + pos, n, &out.messages);
    pos += n;
    if (!out.status.ok()) break;
    FUZZ_CHECK(reader.buffered() <= kHeaderLimit,
               absl::StrCat(reader.buffered(), " bytes kept without a message"));
  }
  out.idle = reader.idle();
  return out;
}

void CheckAnswer(const Reader::Message& m) {
  FUZZ_CHECK(m.body().size() <= kBodyLimit, absl::StrCat("body of ", m.body().size()));
  const HttpReply reply{static_cast<int>(m.result_int()), m.body(),
                        std::string(m[boost::beast::http::field::content_type])};
  const EngineHttp http("http://127.0.0.1:9");
  auto checked = http.ExpectSuccess("/update_weights_from_distributed", reply);
  FUZZ_CHECK(!checked.ok() || (reply.status >= 200 && reply.status < 300),
             absl::StrCat("HTTP ", reply.status, " read as success"));
  const nlohmann::json info = nlohmann::json::parse(reply.body, nullptr, false);
  if (info.is_object()) {
    EngineEndpoint endpoint;
    endpoint.url = "http://127.0.0.1:9";
    endpoint.ranks = 2;
    (void)SglangAdapter::CheckServerInfo(info, endpoint);
  }
}

}  // namespace
}  // namespace wsync

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wsync;
  if (size == 0) return 0;
  const uint8_t split = data[0];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const Reading whole = Read(bytes, 0);
  const Reading pieces = Read(bytes, split == 0 ? 1 : split);
  // Beast parses a header it has whole in one read at once, but one that came in pieces only
  // when its end arrives: bytes that never finish a header may be refused by one reader and
  // awaited by the other (whose header limit then ends them). Bytes that end between messages
  // read the same however they are split: the same messages, no error either way.
  for (const Reading* a : {&whole, &pieces}) {
    const Reading* b = a == &whole ? &pieces : &whole;
    if (a->status.ok() && a->idle) {
      FUZZ_CHECK(b->status.ok(), absl::StrCat("one reader OK between messages; the other (split ",
                                              split, "): ", b->status.ToString()));
      FUZZ_CHECK(a->messages.size() == b->messages.size(),
                 absl::StrCat(a->messages.size(), " vs ", b->messages.size(), " messages"));
    }
  }
  const size_t common = std::min(whole.messages.size(), pieces.messages.size());
  for (size_t i = 0; i < common; ++i) {
    const auto& a = whole.messages[i];
    const auto& b = pieces.messages[i];
    FUZZ_CHECK(a.result_int() == b.result_int() && a.body() == b.body() &&
                   a.keep_alive() == b.keep_alive(),
               absl::StrCat("message ", i, " differs by split"));
  }
  for (const auto& m : whole.messages) CheckAnswer(m);
  return 0;
}
