#ifndef WSYNC_DAEMON_TRANSPORT_HTTP_ENGINE_CHANNELS_H_
#define WSYNC_DAEMON_TRANSPORT_HTTP_ENGINE_CHANNELS_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/transport/http/update_channel.h"

namespace wsync {

// One update's bucket requests to a group's engines: one pipelined keep-alive connection per
// engine, opened when the update begins and cancelled when it ends. Every transport posts its
// bucket requests on these, so the ordering rule of UpdateChannel holds whatever moves the bytes.
// Thread-safe.
class EngineChannels {
 public:
  // Cancels the previous update's channels, if any, and opens one per URL, in order.
  void Open(const std::vector<std::string>& urls);
  // The current update's channels (empty outside an update); holders keep them alive.
  std::vector<std::shared_ptr<UpdateChannel>> Current() const;
  // Cancels the current channels: their open calls end CANCELLED with `why`.
  void CancelAll(absl::string_view why);

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<UpdateChannel>> channels_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_HTTP_ENGINE_CHANNELS_H_
