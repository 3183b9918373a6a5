#include "daemon/transport/http/engine_channels.h"

namespace wsync {

void EngineChannels::Open(const std::vector<std::string>& urls) {
  std::vector<std::shared_ptr<UpdateChannel>> fresh;
  for (const std::string& url : urls) fresh.push_back(std::make_shared<UpdateChannel>(url));
  {
    std::lock_guard<std::mutex> lock(mu_);
    channels_.swap(fresh);
  }
  for (const auto& channel : fresh) channel->Cancel("a new update began");
}

std::vector<std::shared_ptr<UpdateChannel>> EngineChannels::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return channels_;
}

void EngineChannels::CancelAll(absl::string_view why) {
  std::vector<std::shared_ptr<UpdateChannel>> channels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    channels.swap(channels_);
  }
  // Outside the lock: a cancelled call's callback may abort a collective, which takes its time.
  for (const auto& channel : channels) channel->Cancel(why);
}

}  // namespace wsync
