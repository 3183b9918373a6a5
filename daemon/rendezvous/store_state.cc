#include "daemon/rendezvous/store_state.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

constexpr char kReady = 0;
constexpr char kNotReady = 1;
constexpr char kStopWaiting = 0;
constexpr char kWaitCanceled = 1;

void AppendI64(std::string* out, int64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

void StoreState::Open(uint64_t connection) { clients_[connection]; }

void StoreState::Close(uint64_t connection) {
  auto it = clients_.find(connection);
  if (it == clients_.end()) return;
  DropWait(connection, it->second);
  if (it->second.registered) {
    --registered_open_;
    if (ranks_left_.size() < kMaxRanksLeft) ranks_left_.push_back(it->second.pid);
  }
  clients_.erase(it);
}

void StoreState::DropWait(uint64_t connection, Client& client) {
  for (const std::string& key : client.waiting_for) {
    auto w = waiters_.find(key);
    if (w == waiters_.end()) continue;
    w->second.erase(connection);
    if (w->second.empty()) waiters_.erase(w);
  }
  if (!client.registered) unranked_waited_keys_ -= client.waiting_for.size();
  client.waiting_for.clear();
}

void StoreState::KeyCreated(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  for (uint64_t connection : w->second) {
    auto c = clients_.find(connection);
    if (c == clients_.end()) continue;
    c->second.waiting_for.erase(key);
    if (!c->second.registered) --unranked_waited_keys_;
    if (c->second.waiting_for.empty()) woken_.push_back(connection);
  }
  waiters_.erase(w);
}

std::vector<uint64_t> StoreState::TakeWoken() {
  std::vector<uint64_t> out;
  out.swap(woken_);
  return out;
}

StoreState::Outcome StoreState::Apply(uint64_t connection, const StoreRequest& request) {
  auto it = clients_.find(connection);
  if (it == clients_.end()) return Outcome{"", "connection is not open"};
  Client& client = it->second;
  if (!client.validated) {
    // The first request must be VALIDATE with torch's magic; anything else is not a torch client.
    if (request.command != StoreCommand::kValidate || request.u32 != kValidationMagic) {
      return Outcome{"", "the first request is not VALIDATE with torch's magic number"};
    }
    client.validated = true;
    return Outcome{};
  }
  return Run(connection, client, request);
}

StoreState::Outcome StoreState::Run(uint64_t connection, Client& client, const StoreRequest& r) {
  Outcome out;
  auto fail = [&](std::string error) {
    out.reply.clear();
    out.error = std::move(error);
    return out;
  };
  auto put = [&](const std::string& key, std::string value) {
    absl::Status s = Put(key, std::move(value));
    if (!s.ok()) out.error = std::string(s.message());
    return s.ok();
  };
  // Whether any key the request would change is the daemon's (the NCCL id): an engine rank never
  // writes it, and a wrong id would make every rank fail to join.
  auto writes_daemon_key = [&] {
    if (r.command != StoreCommand::kSet && r.command != StoreCommand::kAppend &&
        r.command != StoreCommand::kCompareSet && r.command != StoreCommand::kDeleteKey &&
        r.command != StoreCommand::kMultiSet && r.command != StoreCommand::kAdd) {
      return false;
    }
    for (const auto& k : r.keys) {
      if (DaemonOwned(k)) return true;
    }
    return false;
  };
  if (writes_daemon_key()) return fail("a client may not change a key wsyncd published");
  if (std::string refused = AdmitByPrefix(client, r); !refused.empty()) return fail(refused);
  if (!client.registered && ReadsDaemonKey(r)) {
    return fail("a connection that is not an engine rank may not read a key wsyncd published");
  }
  switch (r.command) {
    case StoreCommand::kValidate:
      return fail("a second VALIDATE");
    case StoreCommand::kPing:
      client.pid = r.u32;
      out.reply.assign(reinterpret_cast<const char*>(&r.u32), 4);
      return out;
    case StoreCommand::kSet:
      put(r.keys[0], r.values[0]);
      return out;
    case StoreCommand::kCompareSet: {
      const std::string& key = r.keys[0];
      const std::string& expected = r.values[0];
      const std::string& desired = r.values[1];
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (!expected.empty()) {
          AppendStoreBytes(&out.reply, expected);
          return out;
        }
        if (!put(key, desired)) return out;
        AppendStoreBytes(&out.reply, desired);
        return out;
      }
      if (it->second == expected && !put(key, desired)) return out;
      AppendStoreBytes(&out.reply, data_.at(key));
      return out;
    }
    case StoreCommand::kGet: {
      auto it = data_.find(r.keys[0]);
      if (it == data_.end()) {
        AppendStoreBytes(&out.reply, "");
        return out;
      }
      auto& fetchers = fetchers_[r.keys[0]];
      if (fetchers.size() < kMaxFetchersPerKey) fetchers.insert(client.pid);
      AppendStoreBytes(&out.reply, it->second);
      return out;
    }
    case StoreCommand::kAdd: {
      const std::string& key = r.keys[0];
      if (key == kInitKey) {
        // torch announces each store client once, with 1. Anything else would let one
        // connection count as several ranks, or a rank that left be counted as present.
        if (r.delta != 1 || client.announced) {
          return fail("ADD to \"init/\" other than one registration of 1");
        }
        // Without a rank prefix the announcement is all there is to go by.
        if (rank_prefix_.empty() && registered_open_ >= max_registered_) {
          return fail(absl::StrCat("all ", max_registered_, " engine ranks are registered"));
        }
      }
      int64_t current = 0;
      auto it = data_.find(key);
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
        return fail(absl::StrCat("ADD to key '", key, "' whose value is not a number"));
      }
      current = static_cast<int64_t>(static_cast<uint64_t>(current) +
                                     static_cast<uint64_t>(r.delta));  // wraps as torch's does
      if (!put(key, std::to_string(current))) return out;
      if (client.added.size() < kMaxAddedKeysPerClient) client.added.insert(key);
      if (key == kInitKey) {
        client.announced = true;
        if (rank_prefix_.empty()) (void)Register(client);
      }
      AppendI64(&out.reply, current);
      return out;
    }
    case StoreCommand::kCheck:
      out.reply.push_back(AllExist(r.keys) ? kReady : kNotReady);
      return out;
    case StoreCommand::kWait: {
      DropWait(connection, client);  // a new WAIT replaces one still pending
      std::set<std::string> missing;
      for (const auto& k : r.keys) {
        if (data_.count(k) == 0) missing.insert(k);
      }
      if (missing.empty()) {
        out.reply.push_back(kStopWaiting);
        return out;
      }
      if (!client.registered) {
        if (unranked_waited_keys_ + missing.size() > kMaxWaitedKeys) {
          return fail(absl::StrCat("pending WAITs would wait for more than ", kMaxWaitedKeys,
                                   " missing keys"));
        }
        unranked_waited_keys_ += missing.size();
      }
      for (const auto& k : missing) {
        if (unpublished_waits_.size() < kMaxUnpublishedWaits) unpublished_waits_.insert(k);
        waiters_[k].insert(connection);
      }
      client.waiting_for = std::move(missing);
      return out;
    }
    case StoreCommand::kMultiGet: {
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        const size_t add = 8 + (it == data_.end() ? 0 : it->second.size());
        if (out.reply.size() + add > limits_.max_reply_bytes) {
          return fail(absl::StrCat("MULTI_GET reply exceeds the limit of ", limits_.max_reply_bytes,
                                   " bytes"));
        }
        AppendStoreBytes(&out.reply, it == data_.end() ? absl::string_view() : it->second);
        if (it != data_.end()) {
          auto& fetchers = fetchers_[k];
          if (fetchers.size() < kMaxFetchersPerKey) fetchers.insert(client.pid);
        }
      }
      return out;
    }
    case StoreCommand::kGetNumKeys:
      AppendI64(&out.reply, static_cast<int64_t>(data_.size()));
      return out;
    case StoreCommand::kDeleteKey: {
      auto it = data_.find(r.keys[0]);
      int64_t deleted = 0;
      if (it != data_.end()) {
        data_bytes_ -= it->first.size() + it->second.size();
        fetchers_.erase(it->first);
        daemon_keys_.erase(it->first);
        data_.erase(it);
        deleted = 1;
      }
      AppendI64(&out.reply, deleted);
      return out;
    }
    case StoreCommand::kAppend: {
      auto it = data_.find(r.keys[0]);
      std::string value = it == data_.end() ? std::string() : it->second;
      if (value.size() + r.values[0].size() > limits_.max_value_bytes) {
        return fail(absl::StrCat("APPEND grows key '", r.keys[0], "' past the value limit of ",
                                 limits_.max_value_bytes, " bytes"));
      }
      value += r.values[0];
      put(r.keys[0], std::move(value));
      return out;
    }
    case StoreCommand::kMultiSet: {
      // All or nothing: a batch that does not fit changes nothing.
      std::map<std::string, size_t> after;  // key -> its bytes once the batch is in
      for (size_t i = 0; i < r.keys.size(); ++i) {
        after[r.keys[i]] = r.keys[i].size() + r.values[i].size();
      }
      size_t total = data_bytes_;
      for (const auto& [k, bytes] : after) {
        auto it = data_.find(k);
        total = total - (it == data_.end() ? 0 : k.size() + it->second.size()) + bytes;
      }
      if (total > limits_.max_data_bytes) {
        return fail(absl::StrCat("the store is full: MULTI_SET would hold ", total,
                                 " bytes; the limit is ", limits_.max_data_bytes));
      }
      for (size_t i = 0; i < r.keys.size(); ++i) put(r.keys[i], r.values[i]);
      return out;
    }
    case StoreCommand::kCancelWait:
      DropWait(connection, client);
      out.reply.push_back(kWaitCanceled);
      return out;
  }
  (void)connection;
  return fail("unknown command");
}

bool StoreState::UnderRankPrefix(const std::string& key) const {
  return !rank_prefix_.empty() && absl::StartsWith(key, rank_prefix_);
}

std::string StoreState::AdmitByPrefix(Client& client, const StoreRequest& r) {
  if (client.registered || rank_prefix_.empty()) return "";
  for (const std::string& k : r.keys) {
    if (UnderRankPrefix(k)) return Register(client);
  }
  return "";
}

std::string StoreState::Register(Client& client) {
  if (client.registered) return "";
  if (registered_open_ >= max_registered_) {
    return absl::StrCat("all ", max_registered_, " engine ranks are registered");
  }
  // What it waits for now counts as a rank's.
  unranked_waited_keys_ -= client.waiting_for.size();
  client.registered = true;
  ++registered_open_;
  return "";
}

bool StoreState::ReadsDaemonKey(const StoreRequest& r) const {
  if (r.command != StoreCommand::kGet && r.command != StoreCommand::kMultiGet) return false;
  for (const std::string& k : r.keys) {
    if (DaemonOwned(k)) return true;
  }
  return false;
}

absl::Status StoreState::Put(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  if (data_bytes_ - old_bytes + new_bytes > limits_.max_data_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store is full: setting key '", key.substr(0, 64), "' would hold ",
        data_bytes_ - old_bytes + new_bytes, " bytes; the limit is ", limits_.max_data_bytes));
  }
  data_bytes_ = data_bytes_ - old_bytes + new_bytes;
  unpublished_waits_.erase(key);
  if (it == data_.end()) {
    data_.emplace(key, std::move(value));
    KeyCreated(key);
  } else {
    it->second = std::move(value);
  }
  return absl::OkStatus();
}

bool StoreState::AllExist(const std::vector<std::string>& keys) const {
  for (const std::string& k : keys) {
    if (data_.count(k) == 0) return false;
  }
  return true;
}

absl::Status StoreState::Set(const std::string& key, std::string value) {
  absl::Status s = Put(key, std::move(value));
  if (s.ok()) daemon_keys_.insert(key);
  return s;
}

std::optional<std::string> StoreState::Get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

size_t StoreState::ErasePrefix(absl::string_view prefix) {
  size_t n = 0;
  for (auto it = data_.lower_bound(std::string(prefix)); it != data_.end();) {
    if (!absl::StartsWith(it->first, prefix)) break;
    data_bytes_ -= it->first.size() + it->second.size();
    fetchers_.erase(it->first);
    daemon_keys_.erase(it->first);
    it = data_.erase(it);
    ++n;
  }
  return n;
}

int64_t StoreState::InitCount() const {
  auto it = data_.find(kInitKey);
  int64_t n = 0;
  if (it != data_.end()) (void)absl::SimpleAtoi(it->second, &n);
  return n;
}

std::vector<uint32_t> StoreState::ConnectedPids() const {
  std::vector<uint32_t> pids;
  for (const auto& [connection, client] : clients_) {
    if (client.validated) pids.push_back(client.pid);
  }
  return pids;
}

std::vector<uint32_t> StoreState::FetchersOf(const std::string& key) const {
  auto it = fetchers_.find(key);
  if (it == fetchers_.end()) return {};
  return std::vector<uint32_t>(it->second.begin(), it->second.end());
}

std::vector<StoreState::Adder> StoreState::AddersOf(const std::string& key) const {
  std::vector<Adder> out;
  for (const auto& [connection, client] : clients_) {
    if (client.added.count(key) != 0) out.push_back(Adder{connection, client.pid});
  }
  return out;
}

bool StoreState::ConnectionOpen(uint64_t connection) const {
  return clients_.count(connection) != 0;
}

bool StoreState::Registered(uint64_t connection) const {
  auto it = clients_.find(connection);
  return it != clients_.end() && it->second.registered;
}

bool StoreState::Holds(uint64_t connection) const {
  auto it = clients_.find(connection);
  if (it == clients_.end()) return false;
  if (it->second.registered) return true;
  return it->second.announced && !rank_prefix_.empty() && registered_open_ < max_registered_;
}

size_t StoreState::announced_open() const {
  size_t n = 0;
  for (const auto& [connection, client] : clients_) n += client.announced ? 1 : 0;
  return n;
}

std::vector<uint32_t> StoreState::RanksLeft() const { return ranks_left_; }

std::vector<std::string> StoreState::UnpublishedWaits() const {
  return std::vector<std::string>(unpublished_waits_.begin(), unpublished_waits_.end());
}

}  // namespace wsync
