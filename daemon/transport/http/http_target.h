#ifndef WSYNC_DAEMON_TRANSPORT_HTTP_HTTP_TARGET_H_
#define WSYNC_DAEMON_TRANSPORT_HTTP_HTTP_TARGET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace wsync {

// An engine's base URL, read once for a client of it (the control requests and the update
// channels alike): where to connect and the Host header to send.
struct HttpTarget {
  std::string base_url;  // as given, without a trailing '/'
  absl::Status status;   // why base_url cannot be reached, if it cannot
  std::string host;
  uint16_t port = 0;
  std::string host_header;  // "host:port", an IPv6 address in brackets
};

// The same reading of the URL as the group's engine allow-list check (ParseHttpUrl).
HttpTarget ParseHttpTarget(const std::string& base_url);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_HTTP_HTTP_TARGET_H_
