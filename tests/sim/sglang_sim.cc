#include "tests/sim/sglang_sim.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/dtype.h"
#include "common/host/host_collective.h"
#include "common/manifest.h"
#include "common/status_macros.h"
#include "tests/sim/tcp_store_client.h"

namespace wsync {
namespace {

using json = nlohmann::json;

constexpr absl::Duration kIdTimeout = absl::Seconds(60);
constexpr absl::Duration kReceiveTimeout = absl::Seconds(300);

void Reply(SimHttpResponse& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void SuccessReply(SimHttpResponse& res, bool ok, const std::string& message) {
  Reply(res, ok ? 200 : 400, {{"success", ok}, {"message", message}});
}

}  // namespace

SglangSim::SglangSim(int tp_size, SimKnobs knobs) : tp_size_(tp_size), knobs_(std::move(knobs)) {}

SglangSim::~SglangSim() { Stop(); }

void SglangSim::Bytes::Resize(uint64_t n) {
  if (n > capacity_) {
    data_.reset(new uint8_t[n]);  // default-initialised: no zeroing pass over pages about to fill
    capacity_ = n;
  }
  size_ = n;
}

void SglangSim::Bytes::Swap(Bytes& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(capacity_, other.capacity_);
}

SglangSim::Rank::~Rank() {
  if (ahead.joinable()) ahead.join();
}

absl::StatusOr<int> SglangSim::Start(const std::string& host, int port) {
  server_ = std::make_unique<SimHttpServer>();
  Routes();
  auto bound = server_->Start(host, port);
  if (!bound.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve on ", host, ":", port, ": ", bound.status().message()));
  }
  return *bound;
}

void SglangSim::Stop() {
  stopping_ = true;
  if (server_) server_->Stop();
}

absl::Status SglangSim::InitGroup(const json& body) {
  auto group = std::make_unique<Group>();
  group->name = body.value("group_name", std::string("weight_update_group"));
  group->master_address = body.at("master_address").get<std::string>();
  group->master_port = body.at("master_port").get<int>();
  group->world_size = body.at("world_size").get<int>();
  group->rank_offset = body.at("rank_offset").get<int>();
  if (group->rank_offset + tp_size_ > group->world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank_offset ", group->rank_offset, " + tp ",
                                                   tp_size_, " exceeds world_size ",
                                                   group->world_size));
  }
  // Every TP rank rendezvouses on its own, as each TP worker process does in SGLang.
  std::vector<absl::Status> results(tp_size_);
  std::vector<std::thread> threads;
  group->ranks.resize(tp_size_);
  for (int r = 0; r < tp_size_; ++r) {
    group->ranks[r] = std::make_unique<Rank>();
    group->ranks[r]->tp_rank = r;
    threads.emplace_back([&, r] {
      auto store = TcpStoreClient::Connect(
          group->master_address, static_cast<uint16_t>(group->master_port),
          static_cast<uint32_t>(::getpid()) * 10 + r, absl::Now() + absl::Seconds(30));
      if (!store.ok()) {
        results[r] = store.status();
        return;
      }
      group->ranks[r]->store = std::move(*store);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) WSYNC_RETURN_IF_ERROR(s);
  std::lock_guard<std::mutex> lock(mu_);
  group_ = std::move(group);
  return absl::OkStatus();
}

absl::Status SglangSim::ReceiveOnRank(Rank& rank, const json& body, int update_index) {
  const int global_rank = group_->rank_offset + rank.tp_rank;
  if (!rank.peer && knobs_.never_fetch_id) {
    // torch built the group with ncclCommSplit from a device-bound default group: it never reads
    // the id and waits on a communicator rank 0 is not part of.
    const absl::Time until = absl::Now() + kReceiveTimeout;
    while (!stopping_ && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
    return absl::DeadlineExceededError("simulated: waiting in ncclCommSplit");
  }
  if (!rank.peer) {
    // torch's ProcessGroupNCCL fetches the id lazily, at the group's first collective.
    const std::string key = absl::StrCat("/", group_->name, "/", group_->name, "//cuda//0");
    WSYNC_RETURN_IF_ERROR(rank.store->Wait({key}, kIdTimeout));
    WSYNC_ASSIGN_OR_RETURN(std::string id, rank.store->Get(key));
    WSYNC_ASSIGN_OR_RETURN(rank.peer, HostCollectivePeer::Join(id, global_rank, group_->world_size,
                                                               absl::Now() + kIdTimeout));
  }
  const auto& names = body["names"];
  const auto& dtypes = body["dtypes"];
  const auto& shapes = body["shapes"];
  std::vector<TensorEntry> entries;
  uint64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    WSYNC_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtypes[i].get<std::string>()));
    std::vector<int64_t> shape = shapes[i].get<std::vector<int64_t>>();
    WSYNC_ASSIGN_OR_RETURN(uint64_t numel, NumElements(shape));
    entries.push_back(
        TensorEntry{names[i].get<std::string>(), dtype, shape, total, numel * DTypeSize(dtype)});
    total += numel * DTypeSize(dtype);
  }
  const bool flattened = body.value("load_format", json()).is_string() &&
                         body["load_format"].get<std::string>() == "flattened_bucket";
  const absl::Time deadline = absl::Now() + kReceiveTimeout;
  if (flattened && update_index == knobs_.die_at_update) {
    // Fault injection: receive half the bucket, then die like a crashed engine process.
    rank.scratch.Resize(total);
    (void)rank.peer->ReceivePartial(rank.scratch.data(), total, total / 2, deadline);
    std::fprintf(stderr, "sglang_sim: dying mid-bucket (update %d) as asked\n", update_index);
    std::fflush(stderr);
    ::_exit(17);
  }
  if (flattened) {
    // flat[start:end].view(dtype) needs the start aligned to the dtype's size. The broadcast
    // happens regardless (every rank takes part), so a misaligned bucket is received, then refused.
    for (const TensorEntry& e : entries) {
      if (e.offset % DTypeSize(e.dtype) != 0) {
        rank.scratch.Resize(total);
        WSYNC_RETURN_IF_ERROR(rank.peer->Receive(rank.scratch.data(), total, deadline));
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", e.name, " starts at byte ", e.offset,
            ", not a multiple of its element size: the view to ", DTypeName(e.dtype), " fails"));
      }
    }
  }
  // Each entry lands in its tensor's incoming buffer, except one whose name comes again later in
  // the request: the last occurrence is what load_weights keeps, the earlier ones go to scratch.
  std::vector<Tensor*> targets(entries.size(), nullptr);
  {
    std::map<std::string, size_t> last;
    for (size_t i = 0; i < entries.size(); ++i) last[entries[i].name] = i;
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (last[entries[i].name] == i) targets[i] = &rank.tensors[entries[i].name];
    }
  }
  uint64_t discarded = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (targets[i] != nullptr) {
      targets[i]->incoming.Resize(entries[i].length);
    } else if (flattened) {
      discarded += entries[i].length;  // laid out back to back
    } else {
      discarded = std::max(discarded, entries[i].length);  // one at a time
    }
  }
  rank.scratch.Resize(discarded);
  if (flattened) {
    // The bucket's bytes go straight to where the tensors live: the receive and load_weights'
    // copy out of the flat buffer become one pass, with the same bytes in the same places.
    std::vector<iovec> pieces;
    uint64_t scratch_used = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      uint8_t* dst =
          targets[i] != nullptr ? targets[i]->incoming.data() : rank.scratch.data() + scratch_used;
      if (targets[i] == nullptr) scratch_used += entries[i].length;
      pieces.push_back(iovec{dst, entries[i].length});
    }
    WSYNC_RETURN_IF_ERROR(rank.peer->ReceiveScattered(pieces, deadline));
  } else {
    for (size_t i = 0; i < entries.size(); ++i) {
      uint8_t* dst = targets[i] != nullptr ? targets[i]->incoming.data() : rank.scratch.data();
      WSYNC_RETURN_IF_ERROR(rank.peer->Receive(dst, entries[i].length, deadline));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto corrupt = rank.tp_rank == 0 ? rank.tensors.find(knobs_.corrupt_tensor) : rank.tensors.end();
  for (Tensor* t : targets) {
    if (t == nullptr) continue;
    t->held.Swap(t->incoming);
    t->present = true;
    t->crc_valid = false;
    if (corrupt != rank.tensors.end() && t == &corrupt->second && t->held.size() > 0) {
      t->held.data()[0] ^= 0xff;
    }
  }
  return absl::OkStatus();
}

// SGLang serialises weight updates behind an asyncio lock, which hands over in arrival order; a
// plain mutex would not, so requests take a ticket and wait for it to be served.
class SglangSim::UpdateTurn {
 public:
  explicit UpdateTurn(SglangSim* sim) : sim_(sim) {
    std::unique_lock<std::mutex> lock(sim_->update_mu_);
    const uint64_t ticket = sim_->next_ticket_++;
    sim_->update_cv_.wait(lock, [&] { return sim_->now_serving_ == ticket; });
  }
  ~UpdateTurn() {
    std::lock_guard<std::mutex> lock(sim_->update_mu_);
    ++sim_->now_serving_;
    sim_->update_cv_.notify_all();
  }

 private:
  SglangSim* sim_;
};

void SglangSim::Routes() {
  server_->SetShaper([this](const SimHttpRequest& req, SimHttpResponse& res) {
    std::lock_guard<std::mutex> lock(mu_);
    knobs_.delivery.Apply(req, res);
  });
  server_->Get("/health", [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 200; });
  server_->Get("/get_server_info", [this](const SimHttpRequest&, SimHttpResponse& res) {
    std::lock_guard<std::mutex> lock(mu_);
    Reply(res, 200,
          {{"version", knobs_.version},
           {"tp_size", tp_size_},
           {"dp_size", 1},
           {"pp_size", 1},
           {"weight_version", weight_version_},
           {"simulator", true}});
  });
  server_->Post(
      "/init_weights_update_group", [this](const SimHttpRequest& req, SimHttpResponse& res) {
        json body = json::parse(req.body, nullptr, false);
        if (body.is_discarded()) return SuccessReply(res, false, "invalid JSON");
        if (knobs_.fail_init) return SuccessReply(res, false, "Failed to init group: simulated");
        int delay_ms = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (group_) {
            return SuccessReply(res, false,
                                absl::StrCat("group '", group_->name, "' already initialized"));
          }
          delay_ms = knobs_.init_delay_ms;
        }
        if (delay_ms > 0) absl::SleepFor(absl::Milliseconds(delay_ms));
        absl::Status s;
        try {
          s = InitGroup(body);
        } catch (const json::exception& e) {
          s = absl::InvalidArgumentError(e.what());
        }
        if (!s.ok()) return SuccessReply(res, false, std::string(s.message()));
        SuccessReply(res, true, "Succeeded to initialize custom process group.");
      });
  server_->Post("/update_weights_from_distributed", [this](const SimHttpRequest& req,
                                                           SimHttpResponse& res) {
    UpdateTurn turn(this);
    const int index = updates_.fetch_add(1);
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.contains("names") || !body.contains("dtypes") ||
        !body.contains("shapes") || body["names"].size() != body["dtypes"].size() ||
        body["names"].size() != body["shapes"].size()) {
      return SuccessReply(res, false, "names, dtypes and shapes must have equal lengths");
    }
    if (knobs_.sessions && !body.is_discarded()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!session_open_) {
        std::fprintf(stderr,
                     "sglang_sim: AssertionError: weight update outside a session (the "
                     "scheduler dies)\n");
        std::_Exit(6);
      }
      session_log_.push_back(
          absl::StrCat("update selector=", body.value("selector", std::string("(none)"))));
    }
    if (knobs_.data_plane) {
      // The bytes were (or will be) taken by the receives /sim/receive_ahead posted.
      if (knobs_.answer_delay_ms > 0) absl::SleepFor(absl::Milliseconds(knobs_.answer_delay_ms));
      return SuccessReply(res, true, "data plane");
    }
    if (index == knobs_.fail_update_at) {
      res.status = 500;
      res.set_content("Internal Server Error", "text/plain");
      return;
    }
    if (index == knobs_.hang_update_at) {
      while (!stopping_) absl::SleepFor(absl::Milliseconds(50));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::string name = body.value("group_name", std::string("weight_update_group"));
      if (!group_ || group_->name != name) {
        return SuccessReply(res, false, absl::StrCat("group '", name, "' is not initialized"));
      }
    }
    std::vector<absl::Status> results(tp_size_);
    std::vector<std::thread> threads;
    for (int r = 0; r < tp_size_; ++r) {
      threads.emplace_back([&, r] {
        try {
          results[r] = ReceiveOnRank(*group_->ranks[r], body, index);
        } catch (const json::exception& e) {
          results[r] = absl::InvalidArgumentError(e.what());
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& s : results) {
      if (!s.ok())
        return SuccessReply(res, false, absl::StrCat("Failed to update parameter: ", s.message()));
    }
    if (knobs_.answer_delay_ms > 0) absl::SleepFor(absl::Milliseconds(knobs_.answer_delay_ms));
    if (body.contains("weight_version") && body["weight_version"].is_string()) {
      std::lock_guard<std::mutex> lock(mu_);
      weight_version_ = body["weight_version"].get<std::string>();
    }
    SuccessReply(res, true, "Succeeded to update parameter online from distributed.");
  });
  server_->Post(
      "/destroy_weights_update_group", [this](const SimHttpRequest& req, SimHttpResponse& res) {
        json body = json::parse(req.body, nullptr, false);
        const std::string name = body.is_object()
                                     ? body.value("group_name", std::string("weight_update_group"))
                                     : std::string("weight_update_group");
        // Behind the update requests that came before it: their receives use the group's ranks,
        // which must not go from under them.
        UpdateTurn turn(this);
        std::unique_ptr<Group> dropped;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (!group_ || group_->name != name) {
            return SuccessReply(res, false, absl::StrCat("group '", name, "' not found"));
          }
          if (knobs_.fail_destroy) {
            return SuccessReply(res, false, "Failed to destroy custom process group: simulated");
          }
          dropped = std::move(group_);
        }
        SuccessReply(res, true, "Succeeded to destroy custom process group.");
      });
  server_->Get("/openapi.json", [this](const SimHttpRequest&, SimHttpResponse& res) {
    if (knobs_.no_docs) {
      res.status = 404;
      res.set_content("{\"detail\":\"Not Found\"}", "application/json");
      return;
    }
    json paths = json::object();
    std::vector<std::string> posts = {"/init_weights_update_group",
                                      "/update_weights_from_distributed",
                                      "/destroy_weights_update_group",
                                      "/pause_generation",
                                      "/continue_generation",
                                      "/update_weight_version",
                                      "/flush_cache"};
    if (knobs_.sessions) {
      posts.push_back("/begin_weight_update");
      posts.push_back("/end_weight_update");
    }
    for (const std::string& p : posts) paths[p] = {{"post", {{"summary", p}}}};
    paths["/get_server_info"] = {{"get", {{"summary", "server info"}}}};
    Reply(res, 200, {{"openapi", "3.1.0"}, {"info", {{"title", "FastAPI"}}}, {"paths", paths}});
  });
  if (knobs_.sessions) {
    // FastAPI answers a route's other methods with 405.
    server_->Get("/begin_weight_update", [](const SimHttpRequest&, SimHttpResponse& res) {
      res.status = 405;
      res.set_content("{\"detail\":\"Method Not Allowed\"}", "application/json");
    });
    server_->Post("/begin_weight_update", [this](const SimHttpRequest& req, SimHttpResponse& res) {
      json body = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (session_open_) {
        std::fprintf(stderr,
                     "sglang_sim: AssertionError: a weight update session is already "
                     "open (the scheduler dies)\n");
        std::_Exit(6);
      }
      session_open_ = true;
      session_log_.push_back(absl::StrCat(
          "begin ", body.is_object() ? body.value("selector", std::string("all")) : "?"));
      SuccessReply(res, true, "Weight update session started.");
    });
    server_->Post("/end_weight_update", [this](const SimHttpRequest&, SimHttpResponse& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!session_open_) return SuccessReply(res, false, "No weight update session is open.");
      session_open_ = false;
      session_log_.push_back("end");
      SuccessReply(res, true, "Weight update session ended.");
    });
  }
  server_->Post("/pause_generation", [this](const SimHttpRequest&, SimHttpResponse& res) {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    Reply(res, 200, {{"message", "Generation paused successfully."}, {"status", "ok"}});
  });
  server_->Post("/continue_generation", [this](const SimHttpRequest&, SimHttpResponse& res) {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
    Reply(res, 200, {{"message", "Generation continued successfully."}, {"status", "ok"}});
  });
  server_->Post("/update_weight_version", [this](const SimHttpRequest& req, SimHttpResponse& res) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.contains("new_version")) {
      return SuccessReply(res, false, "new_version is required");
    }
    std::lock_guard<std::mutex> lock(mu_);
    weight_version_ = body["new_version"].get<std::string>();
    Reply(res, 200,
          {{"success", true},
           {"message", "Weight version updated successfully"},
           {"new_version", weight_version_}});
  });
  auto flush = [](const SimHttpRequest&, SimHttpResponse& res) {
    res.status = 200;
    res.set_content(
        "Cache flushed.\nPlease check backend logs for more details. (When there are "
        "running or waiting requests, the operation will not be performed.)\n",
        "text/plain");
  };
  server_->Post("/flush_cache", flush);
  server_->Get("/flush_cache", flush);
  server_->Get("/sim/checksums", [this](const SimHttpRequest&, SimHttpResponse& res) {
    Reply(res, 200, Checksums());
  });
  server_->Post("/sim/receive_ahead", [this](const SimHttpRequest& req, SimHttpResponse& res) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("sizes")) {
      return Reply(res, 400, {{"error", "sizes expected"}});
    }
    const std::vector<uint64_t> sizes = body["sizes"].get<std::vector<uint64_t>>();
    std::lock_guard<std::mutex> lock(mu_);
    if (!group_) return Reply(res, 400, {{"error", "no group"}});
    for (auto& r : group_->ranks) {
      if (!r->peer) return Reply(res, 400, {{"error", "rank has not joined the collective yet"}});
      if (r->ahead.joinable()) r->ahead.join();
      r->ahead_crcs.clear();
      r->ahead = std::thread([this, rank = r.get(), sizes] {
        Bytes flat;
        for (uint64_t n : sizes) {
          flat.Resize(n);
          if (!rank->peer->Receive(flat.data(), n, absl::Now() + absl::Seconds(30)).ok()) return;
          std::lock_guard<std::mutex> lock(mu_);
          rank->ahead_crcs.push_back(Crc32(flat.data(), n));
        }
      });
    }
    Reply(res, 200, {{"posted", sizes.size()}});
  });
  server_->Get("/sim/received", [this](const SimHttpRequest&, SimHttpResponse& res) {
    std::lock_guard<std::mutex> lock(mu_);
    json ranks = json::object();
    if (group_) {
      for (const auto& r : group_->ranks) {
        json crcs = json::array();
        for (uint32_t c : r->ahead_crcs) crcs.push_back(Crc32Hex(c));
        ranks[std::to_string(group_->rank_offset + r->tp_rank)] = crcs;
      }
    }
    Reply(res, 200, {{"ranks", ranks}});
  });
  if (knobs_.weights_checker) {
    server_->Post("/weights_checker", [this](const SimHttpRequest& req, SimHttpResponse& res) {
      json body = json::parse(req.body, nullptr, false);
      if (!body.is_object() || body.value("action", "") != "checksum") {
        return SuccessReply(res, false, "unsupported action");
      }
      // Checksums() keys the ranks by global rank; the checker lists them in TP order.
      json ranks = Checksums()["ranks"];
      json rank_list = json::array();
      std::vector<std::pair<int, json>> by_rank;
      for (const auto& [key, tensors] : ranks.items())
        by_rank.emplace_back(std::stoi(key), tensors);
      std::sort(by_rank.begin(), by_rank.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t r = 0; r < by_rank.size(); ++r) {
        const std::string all = by_rank[r].second.dump();
        rank_list.push_back({{"checksums", by_rank[r].second},
                             {"per_gpu_checksum", Crc32Hex(Crc32(all.data(), all.size()))},
                             {"parallelism_info", {{"tp_rank", r}, {"tp_size", by_rank.size()}}}});
      }
      Reply(res, 200, {{"success", true}, {"message", "checksum"}, {"ranks", rank_list}});
    });
  }
  server_->Post("/sim/knobs", [this](const SimHttpRequest& req, SimHttpResponse& res) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return Reply(res, 400, {{"error", "JSON object expected"}});
    std::lock_guard<std::mutex> lock(mu_);
    knobs_.fail_init = body.value("fail_init", knobs_.fail_init);
    knobs_.init_delay_ms = body.value("init_delay_ms", knobs_.init_delay_ms);
    knobs_.fail_update_at = body.value("fail_update_at", knobs_.fail_update_at);
    knobs_.hang_update_at = body.value("hang_update_at", knobs_.hang_update_at);
    knobs_.die_at_update = body.value("die_at_update", knobs_.die_at_update);
    knobs_.answer_delay_ms = body.value("answer_delay_ms", knobs_.answer_delay_ms);
    knobs_.never_fetch_id = body.value("never_fetch_id", knobs_.never_fetch_id);
    knobs_.fail_destroy = body.value("fail_destroy", knobs_.fail_destroy);
    knobs_.corrupt_tensor = body.value("corrupt_tensor", knobs_.corrupt_tensor);
    knobs_.data_plane = body.value("data_plane", knobs_.data_plane);
    SimDeliveryKnobs& d = knobs_.delivery;
    d.oversize_routes = body.value("oversize_routes", d.oversize_routes);
    d.oversize_mib = body.value("oversize_mib", d.oversize_mib);
    d.trickle_routes = body.value("trickle_routes", d.trickle_routes);
    d.trickle_ms = body.value("trickle_ms", d.trickle_ms);
    Reply(res, 200, {{"updates_received", updates_.load()}});
  });
}

json SglangSim::Checksums() const {
  std::lock_guard<std::mutex> lock(mu_);
  json ranks = json::object();
  if (group_) {
    for (const auto& r : group_->ranks) {
      json tensors = json::object();
      for (const auto& [name, t] : r->tensors) {
        if (!t.present) continue;
        if (!t.crc_valid) {
          t.crc = Crc32(t.held.data(), t.held.size());
          t.crc_valid = true;
        }
        tensors[name] = Crc32Hex(t.crc);
      }
      ranks[std::to_string(group_->rank_offset + r->tp_rank)] = tensors;
    }
  }
  return {{"weight_version", weight_version_},   {"ranks", ranks},
          {"updates_received", updates_.load()}, {"paused", paused_},
          {"group", group_ ? group_->name : ""}, {"master_port", group_ ? group_->master_port : 0},
          {"session_open", session_open_},       {"session_log", session_log_}};
}

}  // namespace wsync
