#ifndef WSYNC_DAEMON_CORE_HTTP_REPLY_H_
#define WSYNC_DAEMON_CORE_HTTP_REPLY_H_

#include <string>

namespace wsync {

// An engine's answer to one HTTP request, as the adapters judge it.
struct HttpReply {
  int status = 0;
  std::string body;
  std::string content_type;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_HTTP_REPLY_H_
