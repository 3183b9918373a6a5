#include "daemon/transport/http/http_target.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/network_allow_list.h"

namespace wsync {

HttpTarget ParseHttpTarget(const std::string& base_url) {
  HttpTarget t;
  t.base_url = std::string(absl::StripSuffix(base_url, "/"));
  auto url = ParseHttpUrl(t.base_url);
  if (!url.ok()) {
    t.status = url.status();
    return t;
  }
  t.host = url->host;
  t.port = url->port;
  t.host_header = absl::StrCat(
      t.host.find(':') == std::string::npos ? t.host : absl::StrCat("[", t.host, "]"), ":", t.port);
  return t;
}

}  // namespace wsync
