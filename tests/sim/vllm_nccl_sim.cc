#include "tests/sim/vllm_nccl_sim.h"

#include <sys/uio.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/dtype.h"
#include "common/host/host_collective.h"
#include "common/status_macros.h"
#include "tests/sim/tcp_store_client.h"

namespace wsync {
namespace {

using json = nlohmann::json;

constexpr absl::Duration kJoinTimeout = absl::Seconds(60);
constexpr absl::Duration kReceiveTimeout = absl::Seconds(300);
constexpr char kIdKey[] = "/broadcast_from/0/0";

void Message(SimHttpResponse& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json{{"message", message}}.dump(), "application/json");
}

// FastAPI's answer to an exception the route does not catch.
void ServerError(SimHttpResponse& res, const std::string& what) {
  std::fprintf(stderr, "vllm_nccl_sim: %s\n", what.c_str());
  res.status = 500;
  res.set_content("Internal Server Error", "text/plain");
}

// pickle.loads of vLLM's ncclUniqueId: _ctypes._unpickle(cls, ({}, <128 bytes>)), at protocol 3
// or 4 without framing, exactly the opcodes docs/engines/tcpstore.md lists.
absl::StatusOr<std::string> UnpickleUniqueId(const std::string& p) {
  const std::string globals =
      "c_ctypes\n_unpickle\n"
      "cvllm.distributed.device_communicators.pynccl_wrapper\nncclUniqueId\n}";
  const std::string tail = "\x86\x86R.";
  if (p.size() != 2 + globals.size() + 2 + 128 + tail.size() || p[0] != '\x80' ||
      (p[1] != 3 && p[1] != 4) || p.compare(2, globals.size(), globals) != 0 ||
      p[2 + globals.size()] != 'C' || static_cast<uint8_t>(p[3 + globals.size()]) != 128 ||
      p.compare(p.size() - tail.size(), tail.size(), tail) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the ", p.size(), "-byte object under ", kIdKey,
                                                   " does not unpickle to vLLM's ncclUniqueId"));
  }
  return p.substr(4 + globals.size(), 128);
}

// The tensors of an update_info, back to back in names order.
absl::StatusOr<std::vector<TensorEntry>> Tensors(const json& info) {
  const json& names = info.at("names");
  const json& dtypes = info.at("dtype_names");
  const json& shapes = info.at("shapes");
  if (names.size() != dtypes.size() || names.size() != shapes.size()) {
    return absl::InvalidArgumentError("names, dtype_names and shapes differ in length");
  }
  std::vector<TensorEntry> out;
  uint64_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    WSYNC_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtypes[i].get<std::string>()));
    std::vector<int64_t> shape = shapes[i].get<std::vector<int64_t>>();
    WSYNC_ASSIGN_OR_RETURN(uint64_t numel, NumElements(shape));
    const uint64_t bytes = numel * DTypeSize(dtype);
    out.push_back(TensorEntry{names[i].get<std::string>(), dtype, shape, offset, bytes});
    offset += bytes;
  }
  return out;
}

// A dataclass built with Cls(**dict): TypeError (a ValueError in vLLM's message) on any key it
// does not declare.
absl::Status Dataclass(const char* cls, const json& dict, const std::set<std::string>& fields) {
  if (!dict.is_object()) return absl::InvalidArgumentError(absl::StrCat(cls, ": not a dict"));
  for (const auto& [key, value] : dict.items()) {
    if (fields.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("Invalid ", cls,
                                                     ": __init__() got an "
                                                     "unexpected keyword argument '",
                                                     key, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

class VllmNcclSim::Turn {
 public:
  explicit Turn(VllmNcclSim* sim) : sim_(sim) {
    std::unique_lock<std::mutex> lock(sim_->turn_mu_);
    const uint64_t ticket = sim_->next_ticket_++;
    sim_->turn_cv_.wait(lock, [&] { return sim_->now_serving_ == ticket; });
  }
  ~Turn() {
    std::lock_guard<std::mutex> lock(sim_->turn_mu_);
    ++sim_->now_serving_;
    sim_->turn_cv_.notify_all();
  }

 private:
  VllmNcclSim* sim_;
};

VllmNcclSim::VllmNcclSim(int tp_size, VllmSimKnobs knobs)
    : tp_size_(tp_size), knobs_(std::move(knobs)) {
  // An unreadable version stays 0.0: a build older than every gate.
  std::vector<std::string> parts = absl::StrSplit(knobs_.version, '.');
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &major_) ||
      !absl::SimpleAtoi(parts[1], &minor_)) {
    major_ = minor_ = 0;
  }
}

VllmNcclSim::~VllmNcclSim() { Stop(); }

absl::StatusOr<int> VllmNcclSim::Start(const std::string& host, int port) {
  server_ = std::make_unique<SimHttpServer>();
  server_->SetShaper(
      [this](const SimHttpRequest& req, SimHttpResponse& res) { knobs_.delivery.Apply(req, res); });
  Routes();
  return server_->Start(host, port);
}

void VllmNcclSim::Stop() {
  if (server_) server_->Stop();
}

bool VllmNcclSim::AtLeast(int major, int minor) const {
  return major_ > major || (major_ == major && minor_ >= minor);
}

absl::Status VllmNcclSim::JoinRank(Rank& rank, const json& info, const std::string& unique_id,
                                   int world_size) {
  std::string id = unique_id;
  if (id.empty()) {
    // StatelessProcessGroup.create, then PyNcclCommunicator: broadcast_obj(src=0) reads the id.
    WSYNC_ASSIGN_OR_RETURN(
        rank.store, TcpStoreClient::Connect(info.at("master_address").get<std::string>(),
                                            info.at("master_port").get<uint16_t>(),
                                            static_cast<uint32_t>(::getpid()) * 10 + rank.rank,
                                            absl::Now() + kJoinTimeout));
    WSYNC_RETURN_IF_ERROR(rank.store->Wait({kIdKey}, kJoinTimeout));
    WSYNC_ASSIGN_OR_RETURN(std::string pickled, rank.store->Get(kIdKey));
    WSYNC_ASSIGN_OR_RETURN(id, UnpickleUniqueId(pickled));
  }
  WSYNC_ASSIGN_OR_RETURN(
      rank.peer, HostCollectivePeer::Join(id, rank.rank, world_size, absl::Now() + kJoinTimeout));
  // PyNcclCommunicator's warm-up: all_reduce(torch.zeros(1)) and a stream sync.
  WSYNC_ASSIGN_OR_RETURN(float sum, rank.peer->AllReduceSum(0.0f, absl::Now() + kJoinTimeout));
  if (sum != 0.0f) return absl::DataLossError(absl::StrCat("warm-up all-reduce gave ", sum));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<VllmNcclSim::Group>> VllmNcclSim::Init(const json& info) {
  std::set<std::string> fields = {"master_address", "master_port", "rank_offset", "world_size"};
  if (AtLeast(0, 28)) fields.insert({"packed", "packed_buffer_size_bytes", "packed_num_buffers"});
  if (AtLeast(0, 30)) fields.insert("nccl_unique_id_b64");
  WSYNC_RETURN_IF_ERROR(Dataclass("init_info for NCCLWeightTransferEngine", info, fields));
  const bool has_uid = info.contains("nccl_unique_id_b64");
  const bool has_store = info.contains("master_address") || info.contains("master_port");
  if (has_uid == has_store) {
    return absl::InvalidArgumentError(
        "NCCLWeightTransferInitInfo: pass nccl_unique_id_b64 OR master_address/master_port");
  }
  std::string unique_id;
  if (has_uid) {
    const std::string b64 = info["nccl_unique_id_b64"].get<std::string>();
    if (b64.find_first_of("-_") != std::string::npos || !absl::Base64Unescape(b64, &unique_id) ||
        unique_id.size() != 128) {
      return absl::InvalidArgumentError(
          "nccl_unique_id_b64 is not valid standard base64 of 128 bytes");
    }
  }
  auto group = std::make_unique<Group>();
  group->world_size = info.at("world_size").get<int>();
  group->rank_offset = info.at("rank_offset").get<int>();
  group->packed = info.value("packed", false);
  group->chunk_bytes = info.value("packed_buffer_size_bytes", group->chunk_bytes);
  if (group->rank_offset < 1 || group->rank_offset + tp_size_ > group->world_size) {
    return absl::InvalidArgumentError("rank_offset and world_size leave no room for the workers");
  }
  std::vector<absl::Status> results(tp_size_);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp_size_; ++r) {
    group->ranks.push_back(std::make_unique<Rank>());
    group->ranks[r]->rank = group->rank_offset + r;  // dp 0, pp 1: rank_offset + parallel rank
  }
  for (int r = 0; r < tp_size_; ++r) {
    threads.emplace_back([&, r] {
      try {
        results[r] = JoinRank(*group->ranks[r], info, unique_id, group->world_size);
      } catch (const json::exception& e) {
        results[r] = absl::InvalidArgumentError(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) WSYNC_RETURN_IF_ERROR(s);
  return group;
}

absl::Status VllmNcclSim::ReceiveOnRank(Rank& rank, const std::vector<TensorEntry>& tensors,
                                        bool packed, uint64_t chunk_bytes,
                                        std::vector<uint64_t>* chunks) {
  const absl::Time deadline = absl::Now() + kReceiveTimeout;
  std::map<std::string, std::string> incoming;
  std::vector<std::string> bytes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) bytes[i].resize(tensors[i].length);
  if (!packed) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      WSYNC_RETURN_IF_ERROR(rank.peer->Receive(bytes[i].data(), bytes[i].size(), deadline));
      if (chunks != nullptr) chunks->push_back(bytes[i].size());
    }
  } else {
    // packed_tensor.py's consumer: the same walk as the producer's, chunk after chunk.
    std::vector<iovec> pieces;
    uint64_t running = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      pieces.push_back(iovec{bytes[i].data(), bytes[i].size()});
      running += bytes[i].size();
      if (running > chunk_bytes || i + 1 == tensors.size()) {
        WSYNC_RETURN_IF_ERROR(rank.peer->ReceiveScattered(pieces, deadline));
        if (chunks != nullptr) chunks->push_back(running);
        pieces.clear();
        running = 0;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (rank.rank == group_->rank_offset && tensors[i].name == knobs_.corrupt_tensor &&
        !bytes[i].empty()) {
      bytes[i][0] = static_cast<char>(bytes[i][0] ^ 0xff);
    }
    rank.tensors[tensors[i].name] = std::move(bytes[i]);
  }
  return absl::OkStatus();
}

void VllmNcclSim::Routes() {
  auto log = [this](const std::string& call) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(call);
  };
  server_->Get("/health", [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 200; });
  server_->Get("/version", [this](const SimHttpRequest&, SimHttpResponse& res) {
    res.set_content(json{{"version", knobs_.version}}.dump(), "application/json");
  });
  server_->Get("/get_world_size", [this](const SimHttpRequest&, SimHttpResponse& res) {
    res.set_content(json{{"world_size", tp_size_}}.dump(), "application/json");
  });
  server_->Get("/is_sleeping", [](const SimHttpRequest&, SimHttpResponse& res) {
    res.set_content(json{{"is_sleeping", false}}.dump(), "application/json");
  });
  server_->Post("/pause", [this, log](const SimHttpRequest& req, SimHttpResponse& res) {
    log(absl::StrCat("pause?", req.query));
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    res.set_content(json{{"status", "paused"}}.dump(), "application/json");
  });
  server_->Post("/resume", [this, log](const SimHttpRequest&, SimHttpResponse& res) {
    log("resume");
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
    res.set_content(json{{"status", "resumed"}}.dump(), "application/json");
  });
  if (knobs_.weight_checker) {
    server_->Post("/weight_checker", [this](const SimHttpRequest& req, SimHttpResponse& res) {
      json body = json::parse(req.body, nullptr, false);
      if (!body.is_object() || body.value("action", "") != "checksum") {
        res.status = 400;
        res.set_content(json{{"detail", "unknown action"}}.dump(), "application/json");
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (paused_) {
        res.status = 409;
        res.set_content(json{{"detail", "engine is paused"}}.dump(), "application/json");
        return;
      }
      json checksums = json::object();
      if (group_) {
        for (const auto& r : group_->ranks) {
          for (const auto& [name, bytes] : r->tensors) {
            checksums[absl::StrCat("dp0:pp0:pcp0:tp", r->rank - group_->rank_offset,
                                   ":ep0:", name)] = Crc32Hex(Crc32(bytes.data(), bytes.size()));
          }
        }
      }
      res.status = 200;
      res.set_content(json{{"checksums", checksums}}.dump(), "application/json");
    });
  }
  server_->Post("/reset_prefix_cache", [log](const SimHttpRequest&, SimHttpResponse& res) {
    log("reset_prefix_cache");
    res.status = 200;
  });
  server_->Post("/init_weight_transfer_engine", [this, log](const SimHttpRequest& req,
                                                            SimHttpResponse& res) {
    Turn turn(this);
    log("init");
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("init_info")) {
      return Message(res, 400, "init_info is required");
    }
    if (const json& info = body["init_info"]; info.is_object() && info.contains("master_port") &&
                                              info["master_port"].is_number_integer()) {
      std::lock_guard<std::mutex> lock(mu_);
      store_port_ = info["master_port"].get<int>();
    }
    absl::SleepFor(absl::Milliseconds(knobs_.init_delay_ms));
    absl::StatusOr<std::unique_ptr<Group>> group;
    try {
      group = Init(body["init_info"]);
    } catch (const json::exception& e) {
      group = absl::InvalidArgumentError(e.what());
    }
    if (!group.ok()) return ServerError(res, std::string(group.status().message()));
    std::lock_guard<std::mutex> lock(mu_);
    group_ = std::move(*group);  // a new init replaces the old group
    ++inits_;
    Message(res, 200, "Weight transfer initialized");
  });
  if (AtLeast(0, 22)) {
    server_->Post("/start_weight_update", [this, log](const SimHttpRequest&, SimHttpResponse& res) {
      Turn turn(this);
      log("start");
      std::lock_guard<std::mutex> lock(mu_);
      if (session_open_) return Message(res, 409, "a weight update is already in progress");
      session_open_ = true;
      Message(res, 200, "Weight update started");
    });
    server_->Post(
        "/finish_weight_update", [this, log](const SimHttpRequest& req, SimHttpResponse& res) {
          Turn turn(this);
          json body = json::parse(req.body.empty() ? "{}" : req.body, nullptr, false);
          const std::string version =
              body.is_object() ? body.value("weight_version", std::string()) : "";
          log(version.empty() || !AtLeast(0, 29) ? "finish" : absl::StrCat("finish ", version));
          std::lock_guard<std::mutex> lock(mu_);
          if (!session_open_) return Message(res, 409, "no weight update in progress");
          session_open_ = false;
          if (AtLeast(0, 29) && !version.empty()) weight_version_ = version;
          Message(res, 200, "Weight update finished");
        });
  }
  server_->Post("/update_weights", [this, log](const SimHttpRequest& req, SimHttpResponse& res) {
    Turn turn(this);
    const int index = updates_.fetch_add(1);
    log("update");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (AtLeast(0, 22) && !session_open_) {
        return Message(res, 409, "no weight update in progress: call /start_weight_update");
      }
      if (!group_) return ServerError(res, "the weight transfer engine is not initialized");
    }
    if (index == knobs_.conflict_update_at) return Message(res, 409, "simulated conflict");
    if (index == knobs_.fail_update_at) return ServerError(res, "simulated load failure");
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("update_info")) {
      return Message(res, 400, "update_info is required");
    }
    const json& info = body["update_info"];
    std::set<std::string> fields = {"names", "dtype_names", "shapes"};
    if (!AtLeast(0, 28))
      fields.insert({"packed", "packed_buffer_size_bytes", "packed_num_buffers"});
    absl::Status valid = Dataclass("update_info for NCCLWeightTransferEngine", info, fields);
    if (!valid.ok()) return ServerError(res, std::string(valid.message()));
    absl::StatusOr<std::vector<TensorEntry>> tensors;
    try {
      tensors = Tensors(info);
    } catch (const json::exception& e) {
      tensors = absl::InvalidArgumentError(e.what());
    }
    if (!tensors.ok()) return ServerError(res, std::string(tensors.status().message()));
    Group& group = *group_;
    const bool packed = AtLeast(0, 28) ? group.packed : info.value("packed", false);
    const uint64_t chunk = AtLeast(0, 28)
                               ? group.chunk_bytes
                               : info.value("packed_buffer_size_bytes", uint64_t{1} << 30);
    std::vector<absl::Status> results(group.ranks.size());
    std::vector<uint64_t> chunks;
    std::vector<std::thread> threads;
    for (size_t r = 0; r < group.ranks.size(); ++r) {
      threads.emplace_back([&, r] {
        results[r] =
            ReceiveOnRank(*group.ranks[r], *tensors, packed, chunk, r == 0 ? &chunks : nullptr);
      });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& s : results) {
      if (!s.ok()) return ServerError(res, std::string(s.message()));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_chunks_ = std::move(chunks);
    }
    Message(res, 200, "Weights updated");
  });
  server_->Get("/sim/checksums", [this](const SimHttpRequest&, SimHttpResponse& res) {
    res.set_content(Checksums().dump(), "application/json");
  });
}

json VllmNcclSim::Checksums() const {
  std::lock_guard<std::mutex> lock(mu_);
  json ranks = json::object();
  if (group_) {
    for (const auto& r : group_->ranks) {
      json tensors = json::object();
      for (const auto& [name, bytes] : r->tensors) {
        tensors[name] = Crc32Hex(Crc32(bytes.data(), bytes.size()));
      }
      ranks[std::to_string(r->rank)] = tensors;
    }
  }
  return {{"ranks", ranks},
          {"calls", calls_},
          {"last_chunks", last_chunks_},
          {"inits", inits_},
          {"store_port", store_port_},
          {"packed", group_ ? group_->packed : false},
          {"paused", paused_},
          {"session_open", session_open_},
          {"weight_version", weight_version_},
          {"updates_received", updates_.load()}};
}

}  // namespace wsync
