// wsyncctl: operator CLI for wsyncd.

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "client/cpp/progress_bar.h"
#include "client/ctl/table.h"
#include "common/command_line.h"
#include "common/net.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "wsync/v1/admin.grpc.pb.h"

namespace wsync {
namespace {

struct Globals {
  std::string socket;
  std::string address;
  ConnectOptions connect;
  bool json = false;
  double timeout = 10;
};

std::string StateName(v1::GroupState s) {
  std::string name = v1::GroupState_Name(s);
  return absl::AsciiStrToLower(name.substr(std::string("GROUP_STATE_").size()));
}

// A relay group's bytes on the wire and their share of dense: "5.4 MiB (1.63%)".
std::string WireShare(const v1::WireVolume& w) {
  return absl::StrCat(
      HumanBytes(w.sent_bytes()), " (",
      absl::StrFormat("%.2f%%", w.dense_bytes() == 0 ? 0.0
                                                     : 100.0 * static_cast<double>(w.sent_bytes()) /
                                                           static_cast<double>(w.dense_bytes())),
      ")");
}

// The spec's engine kind: kind_name, or (from an older wsyncd) the enum's.
std::string KindName(const v1::GroupSpec& spec) {
  if (!spec.kind_name().empty()) return spec.kind_name();
  std::string name = v1::EngineKind_Name(spec.kind());
  return absl::AsciiStrToLower(name.substr(std::string("ENGINE_KIND_").size()));
}

// The spec's transport: its name, or (from a wsyncd older than transport_name) the enum's.
std::string TransportName(const v1::GroupSpec& spec) {
  if (!spec.transport_name().empty()) return spec.transport_name();
  const v1::Transport t = spec.transport();
  if (t == v1::TRANSPORT_IPC) return "ipc";
  return t == v1::TRANSPORT_UNSPECIFIED || t == v1::TRANSPORT_BROADCAST ? "broadcast" : "unknown";
}

// The engine's own options, as ", load_format per_tensor" (empty when it has none).
std::string OptionsText(const v1::GroupSpec& spec) {
  if (spec.has_sglang()) {
    return absl::StrCat(spec.sglang().load_format() == v1::SGLANG_LOAD_FORMAT_PER_TENSOR
                            ? ", per_tensor"
                            : ", flattened_bucket",
                        spec.sglang().memory() == v1::SGLANG_MEMORY_RESUME ? ", memory resume" : "",
                        spec.sglang().ipc_route() == v1::SGLANG_IPC_ROUTE_IPC ? ", ipc route" : "");
  }
  if (spec.has_lmdeploy()) {
    return spec.lmdeploy().load_format() == v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR
               ? ", load_format null"
               : ", flattened_bucket";
  }
  if (spec.has_vllm()) {
    const v1::VllmOptions& o = spec.vllm();
    const char* pause = o.pause_mode() == v1::VLLM_PAUSE_MODE_WAIT    ? "wait"
                        : o.pause_mode() == v1::VLLM_PAUSE_MODE_ABORT ? "abort"
                                                                      : "keep";
    return absl::StrCat(o.packed() ? ", packed" : ", unpacked", ", pause ", pause,
                        o.rendezvous() == v1::VLLM_RENDEZVOUS_UNIQUE_ID ? ", unique-id" : "",
                        o.wake_weights() ? ", wakes weights" : "",
                        o.keep_prefix_cache() ? ", keeps prefix cache" : "");
  }
  // A kind with no typed message: its options as they travel.
  return spec.engine_options_json().empty() || spec.engine_options_json() == "{}"
             ? ""
             : absl::StrCat(", ", spec.engine_options_json());
}

// One --option value: JSON where it reads as JSON (true, 3, "x"), else the text itself.
nlohmann::json OptionValue(const std::string& text) {
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() || value.is_object() || value.is_array() ? nlohmann::json(text)
                                                                       : value;
}

// vLLM's wire choices as wsyncctl create-group takes them.
struct VllmFlags {
  bool packed = false;
  std::string pause_mode;
  bool wake_weights = false;
  bool keep_prefix_cache = false;
  std::string rendezvous;
  uint64_t packed_chunk_bytes = 0;
};

// The engine options create-group sends: --options, then each --option key=value, then the
// deprecated per-engine flags (each named on stderr with the --option that replaces it).
struct OptionFlags {
  std::string json;
  std::vector<std::string> pairs;
  std::string load_format, sglang_memory, sglang_ipc_route;
  VllmFlags vllm;
};

absl::StatusOr<nlohmann::json> EngineOptionsJson(const OptionFlags& f) {
  nlohmann::json options = nlohmann::json::object();
  if (!f.json.empty()) {
    options = nlohmann::json::parse(f.json, nullptr, /*allow_exceptions=*/false);
    if (options.is_discarded() || !options.is_object()) {
      return absl::InvalidArgumentError("--options must be a JSON object");
    }
  }
  for (const std::string& pair : f.pairs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--option '", pair, "' must be key=value (e.g. load_format=per_tensor)"));
    }
    options[pair.substr(0, eq)] = OptionValue(pair.substr(eq + 1));
  }
  auto legacy = [&](bool used, const char* flag, const char* key, nlohmann::json value) {
    if (!used) return;
    std::cerr << "wsyncctl: " << flag << " is deprecated; use --option " << key << "="
              << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    options[key] = std::move(value);
  };
  legacy(!f.load_format.empty(), "--load-format", "load_format", f.load_format);
  legacy(!f.sglang_memory.empty(), "--sglang-memory", "memory", f.sglang_memory);
  legacy(!f.sglang_ipc_route.empty(), "--sglang-ipc-route", "ipc_route", f.sglang_ipc_route);
  legacy(f.vllm.packed, "--vllm-packed", "packed", true);
  legacy(!f.vllm.pause_mode.empty(), "--vllm-pause-mode", "pause_mode", f.vllm.pause_mode);
  legacy(f.vllm.wake_weights, "--vllm-wake-weights", "wake_weights", true);
  legacy(f.vllm.keep_prefix_cache, "--vllm-keep-prefix-cache", "reset_prefix_cache", false);
  legacy(!f.vllm.rendezvous.empty(), "--vllm-rendezvous", "rendezvous", f.vllm.rendezvous);
  legacy(f.vllm.packed_chunk_bytes != 0, "--vllm-packed-chunk-bytes", "packed_chunk_bytes",
         f.vllm.packed_chunk_bytes);
  return options;
}

// "yes: <why>" for an engine left paused mid-update, "no" otherwise.
std::string NeedsFullVersion(const v1::EngineInfo& e) {
  return e.needs_full_version() ? absl::StrCat("yes: ", e.needs_full_version_reason()) : "no";
}

int PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  std::cout << out;
  return 0;
}

// Whether a TCP connection to "host:port" opens within `timeout`. (ConnectTcp retries a refused
// connection and leaves one attempt unbounded; a check wants one bounded attempt.)
absl::Status ReachTcp(const std::string& address, absl::Duration timeout) {
  absl::StatusOr<std::pair<std::string, uint16_t>> host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host_port->first.c_str(), std::to_string(host_port->second).c_str(),
                           &hints, &found);
      rc != 0) {
    return absl::NotFoundError(gai_strerror(rc));
  }
  absl::Status result = absl::UnavailableError("no address");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1 ? 0 : -1;
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
        errno = err;
        rc = -1;
      } else if (rc != 0) {
        errno = ETIMEDOUT;
      }
    }
    const int saved = errno;
    close(fd);
    if (rc == 0) {
      result = absl::OkStatus();
      break;
    }
    result = absl::UnavailableError(absl::StrCat("cannot connect: ", strerror(saved)));
  }
  freeaddrinfo(found);
  return result;
}

int Error(const grpc::Status& s) {
  // gRPC's codes are absl's, number for number: named as every client names them.
  std::cerr << "wsyncctl: " << s.error_message() << " ("
            << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())) << ")\n";
  return kExitFailed;
}

class Ctl {
 public:
  explicit Ctl(const Globals& g) : g_(g) {}

  int Connect() {
    std::string target = g_.address.empty() ? absl::StrCat("unix:", g_.socket) : g_.address;
    ConnectOptions options = g_.connect;
    options.timeout = absl::Seconds(std::min(g_.timeout, 5.0));
    auto client = Client::Connect(target, options);
    if (!client.ok()) {
      std::cerr << "wsyncctl: " << client.status().message() << " ("
                << absl::StatusCodeToString(client.status().code()) << ")\n";
      return kExitFailed;
    }
    client_ = std::move(*client);
    return 0;
  }
  v1::Admin::Stub* admin() { return client_->admin(); }
  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(g_.timeout)));
    return ctx;
  }

  // Asks the standard health service about each of `services` ("" is wsyncd as a whole); 0 when
  // every one is SERVING, else 1 (a probe's answer).
  int Health(const std::vector<std::string>& services) {
    auto stub = grpc::health::v1::Health::NewStub(client_->channel());
    bool all = true;
    nlohmann::json out = nlohmann::json::object();
    Table t({"SERVICE", "STATUS"});
    for (const std::string& service : services) {
      grpc::health::v1::HealthCheckRequest req;
      req.set_service(service);
      grpc::health::v1::HealthCheckResponse resp;
      auto s = stub->Check(Context().get(), req, &resp);
      const std::string status =
          s.ok() ? grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status())
                 : absl::StrCat("ERROR: ", s.error_message());
      all = all && s.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
      out[service] = status;
      t.AddRow({service.empty() ? "(wsyncd)" : service, status});
    }
    if (g_.json) {
      std::cout << out.dump(2) << "\n";
    } else {
      t.Print(std::cout);
    }
    return all ? 0 : 1;
  }

  // Checks what an operator checks first, one line each (OK, WARN or FAIL and why): the daemon,
  // its GPUs and how they are shared, its NCCL, each group's store port, each engine, and the
  // last commit. Exits 1 when any check FAILs.
  int Doctor() {
    struct Check {
      std::string verdict, what, detail;
    };
    std::vector<Check> checks;
    auto add = [&](const char* verdict, std::string what, std::string detail) {
      checks.push_back({verdict, std::move(what), std::move(detail)});
    };
    v1::DaemonStatus st;
    if (auto s = admin()->GetStatus(Context().get(), v1::GetStatusRequest(), &st); !s.ok()) {
      return Error(s);
    }
    const bool host = st.mode() == "host";
    add("OK", "daemon",
        absl::StrCat("wsyncd ", st.version(), ", mode ", st.mode(), ", up ",
                     absl::FormatDuration(absl::Seconds(st.uptime_seconds()))));
    if (st.draining()) add("WARN", "draining", "new sessions and updates are refused (undrain)");
    if (!st.devices_error().empty()) {
      add("FAIL", "GPUs", st.devices_error());
    } else if (st.device_uuids_size() == 0) {
      add(host ? "OK" : "FAIL", "GPUs", "none visible");
    } else {
      add("OK", "GPUs",
          absl::StrCat(st.device_uuids_size(), host ? " host stand-in(s): " : " visible: ",
                       absl::StrJoin(st.device_uuids(), ", ")));
    }
    if (host) {
      add("OK", "GPU sharing", st.gpu_sharing());
    } else {
      add(st.gpu_sharing() == "mps" ? "OK" : "WARN", "GPU sharing",
          st.gpu_sharing() == "mps"
              ? "MPS"
              : absl::StrCat(st.gpu_sharing(),
                             ": without MPS the trainer's copies and wsyncd's broadcasts take "
                             "turns on the GPU"));
    }
    if (host) {
      add("OK", "NCCL", "none in host mode");
    } else if (st.nccl_libraries_size() == 0) {
      add("FAIL", "NCCL", "no library loaded");
    } else {
      add("OK", "NCCL", absl::StrJoin(st.nccl_libraries(), "; "));
    }
    v1::ListGroupsResponse groups;
    if (auto s = admin()->ListGroups(Context().get(), v1::ListGroupsRequest(), &groups); !s.ok()) {
      return Error(s);
    }
    for (const v1::GroupInfo& g : groups.groups()) {
      const std::string what = absl::StrCat("group ", g.spec().name());
      if (!g.error().empty() && g.state() == v1::GROUP_STATE_BROKEN) {
        add("FAIL", what, absl::StrCat("broken: ", g.error()));
      }
      if (g.rendezvous().empty()) continue;
      absl::Status reached = ReachTcp(g.rendezvous(), absl::Seconds(2));
      add(reached.ok() ? "OK" : "FAIL", absl::StrCat(what, " store"),
          reached.ok() ? absl::StrCat(g.rendezvous(), " accepts connections")
                       : absl::StrCat(g.rendezvous(), ": ", reached.message()));
    }
    v1::ListEnginesResponse engines;
    if (auto s = admin()->ListEngines(Context().get(), v1::ListEnginesRequest(), &engines);
        !s.ok()) {
      return Error(s);
    }
    for (const v1::EngineInfo& e : engines.engines()) {
      const std::string what = absl::StrCat("engine ", e.url());
      if (!e.needs_restart().empty()) {
        add("FAIL", what, e.needs_restart());
      } else if (!e.healthy()) {
        add("FAIL", what, absl::StrCat("not answering: ", e.last_error()));
      } else if (!e.group_error().empty()) {
        add("FAIL", what,
            absl::StrCat("healthy, but group '", e.group(), "' cannot form: ", e.group_error()));
      } else if (e.needs_full_version()) {
        add("WARN", what,
            absl::StrCat("paused, waiting for a full version: ", e.needs_full_version_reason()));
      } else {
        add("OK", what,
            absl::StrCat(e.kind(), " ", e.engine_version(), ", weights '", e.weight_version(),
                         "'"));
      }
    }
    if (st.last_commit_unix_seconds() == 0) {
      add("WARN", "last update", "none committed since wsyncd started");
    } else {
      const absl::Duration ago = absl::Now() - absl::FromUnixSeconds(st.last_commit_unix_seconds());
      add("OK", "last update", absl::StrCat("committed ", absl::ToInt64Seconds(ago), " s ago"));
    }
    bool failed = false;
    nlohmann::json out = nlohmann::json::array();
    Table t({"CHECK", "RESULT", "DETAIL"});
    for (const Check& c : checks) {
      failed = failed || c.verdict == "FAIL";
      out.push_back({{"check", c.what}, {"result", c.verdict}, {"detail", c.detail}});
      t.AddRow({c.what, c.verdict, c.detail});
    }
    if (g_.json) {
      std::cout << out.dump(2) << "\n";
    } else {
      t.Print(std::cout);
    }
    return failed ? 1 : 0;
  }

  // The running updates as they go: bucket k of n, bytes, GiB/s, each engine's answers and the
  // slowest. On a terminal the view is redrawn in place every `interval`; elsewhere each poll is
  // printed as it comes. `count` polls (0: until interrupted).
  int Watch(double interval, int count) {
    const bool terminal = isatty(STDOUT_FILENO) == 1;
    for (int n = 0; count == 0 || n < count; ++n) {
      if (n > 0) absl::SleepFor(absl::Seconds(interval));
      v1::ListProgressResponse resp;
      auto s = admin()->ListProgress(Context().get(), v1::ListProgressRequest(), &resp);
      if (!s.ok()) return Error(s);
      if (g_.json) {
        PrintJson(resp);
        std::cout << "\n" << std::flush;
        continue;
      }
      std::string out = terminal ? "\033[H\033[2J" : "";
      absl::StrAppend(&out, absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()), "  ",
                      resp.updates_size(), " update(s) running\n");
      for (const v1::UpdateProgress& u : resp.updates()) {
        absl::StrAppend(&out, "update ", u.update_id(), "  group ", u.group(), "  version '",
                        u.version(), "'  ", absl::StrFormat("%.1f s", u.seconds()), "\n  ",
                        ProgressBar(u.buckets_done(), u.buckets_planned(), u.bytes_done(),
                                    u.bytes_planned(), u.gib_per_second()),
                        "\n");
        if (u.has_wire_volume()) {
          const v1::WireVolume& w = u.wire_volume();
          absl::StrAppend(&out, "  deltas: sent ", WireShare(w), " of ",
                          HumanBytes(w.dense_bytes()), " dense; ",
                          absl::StrFormat("%.3f%%", 100 * w.changed_fraction()),
                          " of the elements compared changed\n");
        }
        Table t({"ENGINE", "STATE", "BUCKETS", "LAST ANSWER", "MEAN ANSWER"});
        for (const v1::EngineProgress& e : u.engines()) {
          t.AddRow({e.url(), e.state(), absl::StrCat(e.buckets_answered()),
                    absl::StrFormat("%.3f s", e.last_answer_seconds()),
                    absl::StrFormat("%.3f s", e.mean_answer_seconds())});
        }
        std::ostringstream table;
        t.Print(table);
        absl::StrAppend(&out, table.str());
        if (!u.slowest_engine().empty()) {
          absl::StrAppend(&out, "slowest engine: ", u.slowest_engine(), "\n");
        }
      }
      std::cout << out << std::flush;
    }
    return 0;
  }

  int Status() {
    v1::DaemonStatus st;
    auto s = admin()->GetStatus(Context().get(), v1::GetStatusRequest(), &st);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(st);
    Table t({"FIELD", "VALUE"});
    t.AddRow({"version", st.version()});
    t.AddRow({"mode", st.mode()});
    t.AddRow({"listen", st.listen()});
    t.AddRow({"uptime", absl::FormatDuration(absl::Seconds(st.uptime_seconds()))});
    t.AddRow({"draining", st.draining() ? "yes" : "no"});
    t.AddRow({"sessions", absl::StrCat(st.sessions())});
    t.AddRow({"groups", absl::StrCat(st.groups())});
    t.AddRow({"slots", absl::StrCat(st.slots(), " x ", HumanBytes(st.slot_bytes()))});
    t.AddRow({"checksum", st.checksum()});
    t.AddRow({"gpu sharing", st.gpu_sharing()});
    t.AddRow({"updates committed", absl::StrCat(st.updates_committed())});
    t.AddRow({"updates failed", absl::StrCat(st.updates_failed())});
    t.AddRow({"bytes sent", HumanBytes(st.bytes_sent())});
    t.Print(std::cout);
    return 0;
  }

  int Groups() {
    v1::ListGroupsResponse resp;
    auto s = admin()->ListGroups(Context().get(), v1::ListGroupsRequest(), &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    Table t({"NAME", "KIND", "STATE", "WORLD", "ENGINES", "DEVICE", "VERSION", "UPDATES",
             "RENDEZVOUS"});
    for (const auto& g : resp.groups()) {
      t.AddRow({g.spec().name(), KindName(g.spec()), StateName(g.state()),
                absl::StrCat(g.world_size()), absl::StrCat(g.engines_size()),
                absl::StrCat(g.spec().device()), g.last_version(), absl::StrCat(g.updates()),
                g.rendezvous()});
    }
    t.Print(std::cout);
    return 0;
  }

  int Group(const std::string& name) {
    v1::GetGroupRequest req;
    req.set_name(name);
    v1::GroupInfo g;
    auto s = admin()->GetGroup(Context().get(), req, &g);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(g);
    const v1::GroupSpec& spec = g.spec();
    std::cout << "group " << spec.name() << ": " << KindName(spec) << ", " << StateName(g.state())
              << ", world " << g.world_size() << ", device " << spec.device() << ", "
              << TransportName(spec) << OptionsText(spec)
              << (spec.nccl_library().empty() ? "" : ", NCCL " + spec.nccl_library())
              << (spec.check_weights() ? ", weights checked after each commit" : "")
              << (spec.quorum() == 0 ? std::string()
                                     : absl::StrCat(", quorum ", spec.quorum(), " of ",
                                                    spec.engines_size(), " engines"))
              << ", store " << (g.rendezvous().empty() ? "-" : g.rendezvous()) << ", last version "
              << (g.last_version().empty() ? "-" : g.last_version()) << "\n";
    std::cout << "bucket rules: " << g.bucket_rules() << "\n";
    if (!g.error().empty()) std::cout << "last error: " << g.error() << "\n";
    Table t({"ENGINE", "RANKS", "RANK OFFSET", "GPUS", "NEEDS FULL VERSION"});
    for (int i = 0; i < g.engines_size(); ++i) {
      const auto& e = g.engines(i);
      // The spec lists the engines in the same order.
      const std::string gpus = i < spec.engines_size() && spec.engines(i).gpus_size() > 0
                                   ? absl::StrJoin(spec.engines(i).gpus(), ",")
                                   : "-";
      t.AddRow({e.url(), absl::StrCat(e.ranks()), absl::StrCat(e.rank_offset()), gpus,
                NeedsFullVersion(e)});
    }
    t.Print(std::cout);
    return 0;
  }

  int Engines() {
    v1::ListEnginesResponse resp;
    auto s = admin()->ListEngines(Context().get(), v1::ListEnginesRequest(), &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    Table t({"GROUP", "ENGINE", "KIND", "RANKS", "HEALTHY", "ENGINE VERSION", "VARIANT",
             "WEIGHT VERSION", "NEEDS FULL VERSION", "ERROR"});
    for (const auto& e : resp.engines()) {
      const std::string healthy = !e.healthy() ? "no" : e.sleeping() ? "yes (sleeping)" : "yes";
      t.AddRow({e.group(), e.url(), e.kind(),
                absl::StrCat(e.rank_offset(), "-", e.rank_offset() + e.ranks() - 1), healthy,
                e.engine_version(), e.variant(), e.weight_version(), NeedsFullVersion(e),
                EngineError(e)});
    }
    t.Print(std::cout);
    return 0;
  }

  // The ERROR column: why the engine must restart, else why it does not answer, else why its
  // group cannot form (an engine healthy on its own may be why).
  static std::string EngineError(const v1::EngineInfo& e) {
    if (!e.needs_restart().empty()) return absl::StrCat("needs a restart: ", e.needs_restart());
    if (!e.last_error().empty()) return e.last_error();
    if (!e.group_error().empty()) return absl::StrCat("group broken: ", e.group_error());
    return "";
  }

  int ResumeEngine(const std::string& group, const std::string& url) {
    v1::ResumeEngineRequest req;
    req.set_group(group);
    req.set_url(url);
    v1::ResumeEngineResponse resp;
    auto s = admin()->ResumeEngine(Context().get(), req, &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    for (const std::string& u : resp.resumed()) {
      std::cout << "resumed " << u
                << ": it serves the weights it holds until the next complete update\n";
    }
    return 0;
  }

  int Buffers() {
    v1::ListBuffersResponse resp;
    auto s = admin()->ListBuffers(Context().get(), v1::ListBuffersRequest(), &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    Table d({"DEVICE", "HELD", "SLOTS", "SESSION", "MADE", "RELEASED"});
    for (const auto& m : resp.devices()) {
      d.AddRow({absl::StrCat(m.device()),
                m.bytes_held() == 0 ? std::string("released") : HumanBytes(m.bytes_held()),
                absl::StrCat(m.slots()), m.holder_session().empty() ? "-" : m.holder_session(),
                absl::StrCat(m.allocations()), absl::StrCat(m.releases())});
    }
    d.Print(std::cout);
    std::cout << "\n";
    Table t({"DEVICE", "SLOT", "SIZE", "KIND", "STATE", "SESSION"});
    for (const auto& b : resp.buffers()) {
      t.AddRow({absl::StrCat(b.device()), absl::StrCat(b.index()), HumanBytes(b.bytes()), b.kind(),
                b.state(), b.owner_session().empty() ? "-" : b.owner_session()});
    }
    t.Print(std::cout);
    // A relay feed's resident version is memory of the daemon's too.
    v1::RelayStatus relay;
    if (admin()->GetRelay(Context().get(), v1::GetRelayRequest(), &relay).ok() &&
        !relay.residents().empty()) {
      std::cout << "\n";
      PrintResidents(relay);
    }
    return 0;
  }

  // Frees idle slots so training can use the memory; exit 0 when nothing asked for stayed held.
  int ReleaseBuffers(int device) {
    v1::ReleaseBuffersRequest req;
    if (device >= 0) req.set_device(device);
    v1::ReleaseBuffersResponse resp;
    auto s = admin()->ReleaseBuffers(Context().get(), req, &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    std::cout << "released " << HumanBytes(resp.bytes()) << " on "
              << (resp.released().empty()
                      ? std::string("no device")
                      : absl::StrCat("device(s) ", absl::StrJoin(resp.released(), ", ")))
              << "\n";
    for (const auto& b : resp.busy()) std::cout << "kept: " << b << " holds them\n";
    return resp.busy().empty() ? 0 : 1;
  }

  int Updates(uint32_t limit) {
    v1::ListUpdatesRequest req;
    req.set_limit(limit);
    v1::ListUpdatesResponse resp;
    auto s = admin()->ListUpdates(Context().get(), req, &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    Table t({"UPDATE", "GROUP", "VERSION", "STATE", "BUCKETS", "BYTES", "ON THE WIRE", "SECONDS",
             "GIB/S", "MESSAGE"});
    for (const auto& u : resp.updates()) {
      double gibs = u.seconds() > 0 ? u.bytes() / u.seconds() / (1ull << 30) : 0;
      t.AddRow({u.update_id(), u.group(), u.version(), u.state(), absl::StrCat(u.buckets()),
                HumanBytes(u.bytes()),
                u.has_wire_volume() ? WireShare(u.wire_volume()) : std::string("-"),
                absl::StrFormat("%.2f", u.seconds()), absl::StrFormat("%.2f", gibs), u.message()});
    }
    t.Print(std::cout);
    return 0;
  }

  // The node relay from this daemon's side: downstreams subscribed here, and upstreams feeding
  // its groups.
  int Relay() {
    v1::RelayStatus resp;
    auto s = admin()->GetRelay(Context().get(), v1::GetRelayRequest(), &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    if (resp.subscribers().empty() && resp.feeds().empty() && resp.residents().empty()) {
      std::cout << "no relay: no downstream subscribed here, and no relay feed configured\n";
      return 0;
    }
    if (!resp.subscribers().empty()) {
      std::cout << "subscribers (downstream daemons fed from here):\n";
      Table t(
          {"ID", "NODE", "GROUPS", "LAST VERSION", "VERSIONS BEHIND", "SECONDS BEHIND", "CALLER"});
      for (const auto& sub : resp.subscribers()) {
        t.AddRow({sub.id(), sub.node(), absl::StrJoin(sub.groups(), ","),
                  sub.last_version().empty() ? "-" : sub.last_version(),
                  absl::StrCat(sub.versions_behind()),
                  absl::StrFormat("%.1f", sub.seconds_behind()), sub.caller()});
      }
      t.Print(std::cout);
    }
    if (!resp.feeds().empty()) {
      std::cout << "feeds (upstream relay groups feeding groups here):\n";
      Table t({"UPSTREAM", "GROUP", "LOCAL GROUP", "NODE", "SUBSCRIBED", "LAST VERSION",
               "COMMITTED", "LAST ERROR"});
      for (const auto& f : resp.feeds()) {
        t.AddRow({f.upstream(), f.group(), f.local_group(), f.node(),
                  f.subscribed() ? absl::StrCat("yes (", f.subscriber_id(), ")") : "no",
                  f.last_version().empty() ? "-" : f.last_version(),
                  absl::StrCat(f.updates_committed()), f.last_error()});
      }
      t.Print(std::cout);
    }
    PrintResidents(resp);
    return 0;
  }

  // Each relay feed's resident version, as `relay` and `buffers` show it.
  static void PrintResidents(const v1::RelayStatus& resp) {
    if (resp.residents().empty()) return;
    std::cout << "resident versions (kept for engines that restart):\n";
    Table t({"LOCAL GROUP", "MEDIUM", "VERSION", "BUCKETS", "BYTES", "CAP", "NOTE"});
    for (const auto& r : resp.residents()) {
      t.AddRow({r.local_group(), r.medium(), r.version().empty() ? "-" : r.version(),
                absl::StrCat(r.buckets()), HumanBytes(r.bytes()), HumanBytes(r.cap_bytes()),
                r.why_none()});
    }
    t.Print(std::cout);
  }

  int CreateGroup(const std::string& name, const std::string& kind,
                  const std::vector<std::string>& engines, int device, const std::string& transport,
                  const OptionFlags& option_flags, const std::string& nccl_library,
                  bool check_weights, uint32_t quorum) {
    v1::CreateGroupRequest req;
    v1::GroupSpec* group = req.mutable_spec();
    group->set_name(name);
    // The kind and its options go by name and as JSON: wsyncd's kinds check them.
    group->set_kind_name(kind);
    absl::StatusOr<nlohmann::json> options = EngineOptionsJson(option_flags);
    if (!options.ok()) {
      std::cerr << "wsyncctl: " << options.status().message() << "\n";
      return kExitUsage;
    }
    group->set_engine_options_json(options->dump());
    group->set_device(device);
    group->set_nccl_library(nccl_library);
    group->set_check_weights(check_weights);
    group->set_quorum(quorum);
    // By name: wsyncd knows its transports (and refuses an unknown one, naming those it has).
    group->set_transport_name(transport.empty() ? "broadcast" : transport);
    for (const std::string& e : engines) {
      auto* spec = group->add_engines();
      // URL[#RANKS][@GPU,GPU...]: the GPUs are each rank's, by UUID.
      std::string rest = e;
      if (size_t at = rest.rfind('@'); at != std::string::npos && at > rest.find("://") + 2) {
        for (absl::string_view gpu : absl::StrSplit(rest.substr(at + 1), ',', absl::SkipEmpty())) {
          spec->add_gpus(std::string(gpu));
        }
        rest.resize(at);
      }
      size_t hash = rest.find('#');
      spec->set_url(rest.substr(0, hash));
      uint32_t ranks = spec->gpus_size() > 0 ? spec->gpus_size() : 1;
      if (hash != std::string::npos && !absl::SimpleAtoi(rest.substr(hash + 1), &ranks)) {
        std::cerr << "wsyncctl: '" << e << "': ranks after '#' must be a number\n";
        return kExitUsage;
      }
      spec->set_ranks(ranks);
    }
    v1::GroupInfo g;
    auto ctx = Context();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(std::max(g_.timeout, 120.0))));
    auto s = admin()->CreateGroup(ctx.get(), req, &g);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(g);
    std::cout << "group " << g.spec().name() << " " << StateName(g.state()) << ", world "
              << g.world_size() << ", store " << g.rendezvous() << "\n";
    return 0;
  }

  int DestroyGroup(const std::string& name) {
    v1::DestroyGroupRequest req;
    req.set_name(name);
    v1::DestroyGroupResponse resp;
    // Engines are called to drop the group: as slow as create.
    auto ctx = Context();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(std::max(g_.timeout, 120.0))));
    auto s = admin()->DestroyGroup(ctx.get(), req, &resp);
    if (!s.ok()) return Error(s);
    std::cout << "group " << name << " destroyed\n";
    return 0;
  }

  int Drain(uint32_t timeout) {
    v1::DrainRequest req;
    req.set_timeout_seconds(timeout);
    v1::DrainResponse resp;
    auto ctx = Context();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(timeout + 10)));
    auto s = admin()->Drain(ctx.get(), req, &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    std::cout << (resp.drained() ? "drained" : "NOT drained: updates still running") << " ("
              << resp.updates_waited() << " running updates waited for)\n";
    return resp.drained() ? 0 : 1;
  }

  // Ends another connection's session (an admin's call; a trainer may end only its own).
  int CloseSession(const std::string& id) {
    v1::CloseSessionRequest req;
    req.set_session_id(id);
    v1::CloseSessionResponse resp;
    auto s = client_->trainer()->CloseSession(Context().get(), req, &resp);
    if (!s.ok()) return Error(s);
    std::cout << "closed session " << id << "\n";
    return 0;
  }

  int Undrain() {
    v1::UndrainResponse resp;
    auto s = admin()->Undrain(Context().get(), v1::UndrainRequest(), &resp);
    if (!s.ok()) return Error(s);
    if (g_.json) return PrintJson(resp);
    std::cout << (resp.was_draining() ? "undrained: new sessions and updates are taken again"
                                      : "was not draining")
              << "\n";
    return 0;
  }

 private:
  Globals g_;
  std::unique_ptr<Client> client_;
};

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  wsync::Globals g;
  const char* env_socket = std::getenv("WSYNC_SOCKET");
  g.socket = env_socket ? env_socket : "/run/wsync/wsyncd.sock";
  CLI::App app{"wsyncctl: inspect and steer wsyncd (exit status: 0 done, 1 failed, 2 usage)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "wsyncctl " WSYNC_VERSION);
  // The global options (--json, --socket, ...) are taken after the subcommand too.
  app.fallthrough();
  app.add_option("--socket", g.socket, "wsyncd's unix socket (env WSYNC_SOCKET)");
  app.add_option("--address", g.address, "wsyncd's TCP host:port instead of the socket");
  g.connect = wsync::ConnectOptions::FromEnvironment();
  app.add_option("--tls-ca", g.connect.tls_ca_file,
                 "CA certificate (PEM) that signed wsyncd's TLS certificate (env WSYNC_TLS_CA)");
  app.add_option("--token-file", g.connect.token_file,
                 "file with the trainer or admin token for --address (env WSYNC_TOKEN_FILE)");
  app.add_flag("--json", g.json, "print JSON instead of tables");
  app.add_option("--timeout", g.timeout, "seconds to wait for an answer");

  auto* status = app.add_subcommand("status", "daemon status");
  auto* groups = app.add_subcommand("groups", "list weight groups");
  std::string name;
  auto* group = app.add_subcommand("group", "one weight group in detail");
  group->add_option("name", name)->required();
  auto* engines = app.add_subcommand("engines", "engine health and weight versions");
  auto* buffers = app.add_subcommand("buffers", "slots and who holds them");
  auto* release_buffers = app.add_subcommand(
      "release-buffers", "free the slots no session holds, for training to use the memory");
  int release_device = -1;
  release_buffers->add_option("--device", release_device, "only this device (default: all)")
      ->check(CLI::Range(0, 1 << 20));
  uint32_t limit = 20;
  auto* relay = app.add_subcommand(
      "relay", "the node relay: downstreams subscribed here, upstreams feeding groups here");
  auto* updates = app.add_subcommand("updates", "recent updates");
  updates->add_option("--limit", limit, "how many");
  std::string kind = "sglang";
  std::vector<std::string> engine_urls;
  int device = 0;
  auto* create = app.add_subcommand("create-group", "create a weight group and join its engines");
  create->add_option("name", name)->required();
  create->add_option("--kind", kind, "sglang, vllm or lmdeploy");
  create
      ->add_option("--engine", engine_urls,
                   "engine URL, with '#N' for N ranks (TP size) and '@UUID,UUID' for the GPU "
                   "of each rank (the ipc transport needs them)")
      ->required();
  create->add_option("--device", device, "GPU whose slots feed the group");
  std::string transport;
  create
      ->add_option("--transport", transport,
                   "broadcast (NCCL, disaggregated; the default) or ipc (colocated)")
      ->check(CLI::IsMember({"broadcast", "ipc"}));
  wsync::OptionFlags option_flags;
  create->add_option("--option", option_flags.pairs,
                     "the engine kind's own option as key=value, repeatable (e.g. "
                     "load_format=per_tensor; vllm: packed=true, rendezvous=unique-id); the keys "
                     "are the kind's, as in the config file's \"<kind>\" object");
  create->add_option("--options", option_flags.json,
                     "the engine kind's options as one JSON object (--option adds to it)");
  std::string& load_format = option_flags.load_format;
  create
      ->add_option("--load-format", load_format,
                   "sglang, lmdeploy: flattened_bucket (default; the bucket as one buffer) or "
                   "per_tensor (also spelt null, the engines' own word: one view or broadcast "
                   "per tensor)")
      ->check(CLI::IsMember({"flattened_bucket", "per_tensor", "null"}));
  std::string& sglang_memory = option_flags.sglang_memory;
  create
      ->add_option("--sglang-memory", sglang_memory,
                   "sglang: keep (default: the engine's memory stays resident) or resume (training "
                   "releases it before each update; wsyncd resumes the weights before the buckets "
                   "and the KV cache after the commit)")
      ->check(CLI::IsMember({"keep", "resume"}));
  std::string& sglang_ipc_route = option_flags.sglang_ipc_route;
  create
      ->add_option("--sglang-ipc-route", sglang_ipc_route,
                   "sglang, transport ipc: tensor (default: /update_weights_from_tensor per "
                   "bucket) or ipc (/update_weights_from_ipc once per update: each rank maps its "
                   "buffer once and takes the buckets over ZMQ; needs checkpoint-engine in the "
                   "engine)")
      ->check(CLI::IsMember({"tensor", "ipc"}));
  wsync::VllmFlags& vllm = option_flags.vllm;
  create->add_flag("--vllm-packed", vllm.packed,
                   "vllm: ipc: each bucket as one uint8 chunk with tensor_sizes (vLLM >= 0.22.0); "
                   "broadcast: uint8 chunks cut as vLLM's packed producer cuts them");
  create
      ->add_option("--vllm-rendezvous", vllm.rendezvous,
                   "vllm, broadcast: store (default; the workers' StatelessProcessGroup meets "
                   "wsyncd's TCPStore) or unique-id (the NCCL id in the init request; vLLM >= "
                   "0.30.0)")
      ->check(CLI::IsMember({"store", "unique-id"}));
  create->add_option("--vllm-packed-chunk-bytes", vllm.packed_chunk_bytes,
                     "vllm, broadcast, packed: packed_buffer_size_bytes (default 1 GiB)");
  create
      ->add_option("--vllm-pause-mode", vllm.pause_mode,
                   "vllm: what /pause does with requests in flight: keep (default; they wait), "
                   "wait (they finish first) or abort")
      ->check(CLI::IsMember({"keep", "wait", "abort"}));
  create->add_flag("--vllm-wake-weights", vllm.wake_weights,
                   "vllm: wake the weights of an engine found asleep (and its KV cache after) "
                   "instead of refusing the update");
  create->add_flag("--vllm-keep-prefix-cache", vllm.keep_prefix_cache,
                   "vllm: do not reset the prefix cache after an update");
  std::string nccl_library;
  create->add_option(
      "--nccl-lib", nccl_library,
      "broadcast: the libnccl.so.2 rank 0 loads for this group, the one its engines' "
      "torch runs (default: wsyncd's --nccl-lib)");
  bool check_weights = false;
  create->add_flag("--check-weights", check_weights,
                   "sglang, vllm: after every commit, compare the engines' own weight checksums "
                   "with each other; an engine that differs fails the update");
  uint32_t quorum = 0;
  create->add_option("--quorum", quorum,
                     "engines an update needs (default 0: all); with fewer, an update goes on "
                     "without engines that fail and commits once this many committed");
  double watch_interval = 0.5;
  int watch_count = 0;
  auto* watch = app.add_subcommand(
      "watch", "show the running updates as they go: buckets, bytes, GiB/s, each engine");
  watch->add_option("--interval", watch_interval, "seconds between polls")
      ->check(CLI::Range(0.05, 3600.0));
  watch->add_option("--count", watch_count, "polls, then exit (0: until interrupted)");
  auto* doctor = app.add_subcommand(
      "doctor",
      "check the daemon, its GPUs, MPS, NCCL, each group's store port, each engine and the last "
      "commit; exits 1 when a check fails");
  std::vector<std::string> health_services;
  auto* health = app.add_subcommand(
      "health",
      "ask the standard gRPC health service; exits 0 when every service asked is SERVING, 1 "
      "otherwise (also when wsyncd does not answer): for probes");
  health->add_option("--service", health_services,
                     "service to ask: '' (wsyncd: its GPUs answer), wsync.v1.Trainer (also not "
                     "draining), wsync.v1.Admin (default: all three)");
  auto* destroy = app.add_subcommand("destroy-group", "tear a weight group down");
  destroy->add_option("name", name)->required();
  uint32_t drain_timeout = 60;
  auto* drain = app.add_subcommand("drain", "refuse new updates and wait for running ones");
  drain->add_option("--timeout", drain_timeout, "seconds to wait");
  auto* undrain = app.add_subcommand("undrain", "take new sessions and updates again");
  std::string session_id;
  auto* close_session =
      app.add_subcommand("close-session", "end a trainer's session and free its slots (admin)");
  close_session->add_option("id", session_id, "session id (wsyncctl buffers shows holders)")
      ->required();
  std::string resume_url;
  auto* resume = app.add_subcommand(
      "resume-engine",
      "resume engines left paused mid-update (NEEDS FULL VERSION), serving the mix of versions "
      "they hold; otherwise the next complete update resumes them");
  resume->add_option("group", name)->required();
  resume->add_option("--engine", resume_url,
                     "the engine's URL (default: every engine of the group that needs a full "
                     "version)");
  if (const int exit_code = wsync::ParseCommandLine(app, argc, argv); exit_code >= 0) {
    return exit_code;
  }

  wsync::Ctl ctl(g);
  if (int rc = ctl.Connect(); rc != 0) return rc;
  if (*health) {
    if (health_services.empty()) health_services = {"", "wsync.v1.Trainer", "wsync.v1.Admin"};
    return ctl.Health(health_services);
  }
  if (*status) return ctl.Status();
  if (*doctor) return ctl.Doctor();
  if (*watch) return ctl.Watch(watch_interval, watch_count);
  if (*groups) return ctl.Groups();
  if (*group) return ctl.Group(name);
  if (*engines) return ctl.Engines();
  if (*buffers) return ctl.Buffers();
  if (*release_buffers) return ctl.ReleaseBuffers(release_device);
  if (*updates) return ctl.Updates(limit);
  if (*relay) return ctl.Relay();
  if (*create)
    return ctl.CreateGroup(name, kind, engine_urls, device, transport, option_flags, nccl_library,
                           check_weights, quorum);
  if (*destroy) return ctl.DestroyGroup(name);
  if (*drain) return ctl.Drain(drain_timeout);
  if (*undrain) return ctl.Undrain();
  if (*close_session) return ctl.CloseSession(session_id);
  if (*resume) return ctl.ResumeEngine(name, resume_url);
  return wsync::kExitUsage;
}
