#ifndef WSYNC_DAEMON_ENGINES_HTTP_EXCHANGE_H_
#define WSYNC_DAEMON_ENGINES_HTTP_EXCHANGE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/http_reply.h"

namespace wsync {

// What one answer may hold. An engine's answer is read into memory, so without a bound an
// engine (or whatever listens at its URL) could have wsyncd allocate until it dies.
struct HttpAnswerLimits {
  uint64_t body_bytes = 1 << 20;
  // The status line and header fields together.
  uint32_t header_bytes = 64 << 10;
};

// One HTTP/1.1 request and its whole answer over a connection of its own, closed after it. One
// deadline bounds all of it: connecting (at most `connect_within` of it), writing the request and
// reading the answer, however the engine spreads its bytes over time. `request` is the whole
// request as written on the wire.
//
// Errors (their messages are for the debug log: they say how the exchange ended):
//   RESOURCE_EXHAUSTED  the answer's body or header is longer than `limits` allows;
//   DEADLINE_EXCEEDED   no whole answer by the deadline;
//   UNAVAILABLE         no connection, or the engine closed it before a whole answer;
//   INVALID_ARGUMENT    the answer is not HTTP.
absl::StatusOr<HttpReply> ExchangeHttp(const std::string& host, uint16_t port,
                                       const std::string& request, const HttpAnswerLimits& limits,
                                       absl::Time deadline,
                                       absl::Duration connect_within = absl::Seconds(10));

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_HTTP_EXCHANGE_H_
