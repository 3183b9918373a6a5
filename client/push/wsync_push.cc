// wsync-push: pushes a synthetic model through wsyncd, version after version, and (against engine
// simulators) checks that every engine rank holds exactly the trainer's bytes.

#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "client/cpp/progress_bar.h"
#include "client/push/synthetic_model.h"
#include "common/checksum.h"
#include "common/command_line.h"
#include "nlohmann/json.hpp"

namespace wsync {
namespace {

using ChecksumMap = std::map<std::string, std::string>;

// Compares the trainer's per-tensor CRCs with each rank's, as the engine simulator reports them.
bool VerifyEngine(const std::string& url, const std::string& version, const ChecksumMap& expected,
                  std::string* report) {
  httplib::Client http(url);
  http.set_read_timeout(60, 0);
  auto res = http.Get("/sim/checksums");
  if (!res || res->status != 200) {
    *report = absl::StrCat(url, ": cannot read /sim/checksums");
    return false;
  }
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded()) {
    *report = absl::StrCat(url, ": /sim/checksums is not JSON");
    return false;
  }
  bool ok = j.value("weight_version", std::string()) == version;
  std::vector<std::string> parts;
  for (auto& [rank, tensors] : j["ranks"].items()) {
    size_t match = 0, bad = 0;
    for (const auto& [name, crc] : expected) {
      if (tensors.contains(name) && tensors[name].get<std::string>() == crc) {
        ++match;
      } else {
        ++bad;
      }
    }
    const bool extra = tensors.size() != expected.size();
    ok = ok && bad == 0 && !extra;
    parts.push_back(absl::StrCat("rank ", rank, " ", match, "/", expected.size(),
                                 bad || extra ? " MISMATCH" : " identical"));
  }
  if (parts.empty()) ok = false;
  *report = absl::StrCat(url, " (weight_version ", j.value("weight_version", std::string("?")),
                         "): ", absl::StrJoin(parts, ", "));
  return ok;
}

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  CLI::App app{
      "wsync-push: push a synthetic model through wsyncd (exit status: 0 done, 1 failed, "
      "2 usage)"};
  app.set_version_flag("--version", "wsync-push " WSYNC_VERSION);
  std::string socket = "/run/wsync/wsyncd.sock", address, group, prefix = "v";
  double model_gib = 1.0;
  int versions = 1, device = 0;
  bool verify = false;
  double changed_fraction = -1;
  app.add_option("--socket", socket, "wsyncd's unix socket");
  app.add_option("--address", address, "wsyncd's TCP host:port instead of the socket");
  app.add_option("--group", group, "weight group to update")->required();
  app.add_option("--device", device, "device whose slots to use");
  app.add_option("--model-gib", model_gib, "approximate model size in GiB");
  app.add_option("--versions", versions, "number of consecutive versions to push");
  app.add_option("--version-prefix", prefix, "versions are named PREFIX1, PREFIX2, ...");
  app.add_option("--changed-fraction", changed_fraction,
                 "after the first version, change only this fraction (0 to 1) of each tensor's "
                 "elements from the version before, as an RL step does (default: every byte)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--verify-sim", verify,
               "after each version, compare every engine rank's tensors (engine simulators only)");
  std::vector<std::string> verify_engines;
  app.add_option("--verify-engine", verify_engines,
                 "with --verify-sim: compare these engine simulators (URLs) instead of the "
                 "group's engines, e.g. the engines a relay group's downstream daemons feed");
  if (const int exit_code = wsync::ParseCommandLine(app, argc, argv); exit_code >= 0) {
    return exit_code;
  }
  // Progress is read as it happens, also through a pipe (the demo's output, a CI log).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  const std::string target = address.empty() ? absl::StrCat("unix:", socket) : address;
  auto client = wsync::Client::Connect(target);
  if (!client.ok()) {
    std::fprintf(stderr, "wsync-push: %s\n", std::string(client.status().message()).c_str());
    return wsync::kExitFailed;
  }
  if (auto s = (*client)->OpenSession(device, absl::StrCat("wsync-push pid ", getpid())); !s.ok()) {
    std::fprintf(stderr, "wsync-push: open session: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<std::string> engines = verify_engines;
  if (verify && engines.empty()) {
    grpc::ClientContext ctx;
    wsync::v1::GetGroupRequest req;
    req.set_name(group);
    wsync::v1::GroupInfo info;
    auto s = (*client)->admin()->GetGroup(&ctx, req, &info);
    if (!s.ok()) {
      std::fprintf(stderr, "wsync-push: group %s: %s\n", group.c_str(), s.error_message().c_str());
      return 1;
    }
    for (const auto& e : info.engines()) engines.push_back(e.url());
  }

  bool all_ok = true;
  // One allocation serves every version; each version rewrites the contents before its update.
  std::vector<wsync::SyntheticTensor> model;
  for (int v = 1; v <= versions; ++v) {
    const std::string version = absl::StrCat(prefix, v);
    if (model.empty()) {
      model = wsync::MakeSyntheticModel(static_cast<uint64_t>(model_gib * (1ull << 30)),
                                        (*client)->slot_bytes(), static_cast<uint32_t>(v));
    } else if (changed_fraction >= 0) {
      wsync::ChangeSyntheticModel(model, static_cast<uint32_t>(v), changed_fraction);
    } else {
      wsync::FillSyntheticModel(model, static_cast<uint32_t>(v));
    }
    std::vector<wsync::TensorRef> refs;
    std::map<std::string, std::string> expected;
    uint64_t total = 0;
    for (const auto& t : model) {
      refs.push_back({t.name, t.dtype, t.shape, t.data.data(), t.data.size()});
      if (verify) expected[t.name] = wsync::Crc32Hex(wsync::Crc32(t.data.data(), t.data.size()));
      total += t.data.size();
    }
    std::printf("update %s: %zu tensors, %.2f GiB\n", version.c_str(), model.size(),
                total / double(1ull << 30));
    // On a terminal, one bar redrawn in place; in a log, one line per bucket.
    const bool terminal = isatty(STDOUT_FILENO) == 1;
    auto result = (*client)->Push(group, version, refs, [&](const wsync::PushProgress& p) {
      const double rate = p.seconds > 0 ? p.bytes_done / p.seconds / double(1ull << 30) : 0.0;
      if (terminal) {
        std::printf("\r  %s", wsync::ProgressBar(p.buckets_done, p.buckets_total, p.bytes_done,
                                                 p.bytes_total, rate)
                                  .c_str());
        if (p.buckets_done == p.buckets_total) std::printf("\n");
      } else {
        std::printf("  bucket %3llu/%llu  %8.1f MiB  %6.2f GiB/s\n",
                    static_cast<unsigned long long>(p.buckets_done),
                    static_cast<unsigned long long>(p.buckets_total),
                    p.bytes_done / double(1 << 20), rate);
      }
      std::fflush(stdout);
    });
    if (!result.ok()) {
      std::printf("update %s FAILED: %s\n", version.c_str(), result.status().ToString().c_str());
      all_ok = false;
      break;
    }
    std::printf("update %s committed: %llu buckets, %.2f GiB in %.2f s (%.2f GiB/s), id %s\n",
                version.c_str(), static_cast<unsigned long long>(result->buckets),
                result->bytes / double(1ull << 30), result->seconds, result->gib_per_second(),
                result->update_id.c_str());
    // Where the update's time went, summed over its buckets as wsyncd measured them.
    std::printf(
        "  wsyncd: verify %.2f s, idle %.2f s, wire %.2f s, answers %.2f s, "
        "requests late %.2f s, first launch %.2f s, finish %.2f s\n",
        result->verify_seconds, result->idle_seconds, result->wire_seconds, result->answer_seconds,
        result->request_late_seconds, result->first_launch_seconds, result->finish_seconds);
    if (result->has_wire_volume) {
      std::printf("  relay: sent %llu of %llu dense bytes (%.2f%%), %.3f%% of elements changed\n",
                  static_cast<unsigned long long>(result->wire_sent_bytes),
                  static_cast<unsigned long long>(result->wire_dense_bytes),
                  result->wire_dense_bytes == 0
                      ? 0.0
                      : 100.0 * result->wire_sent_bytes / result->wire_dense_bytes,
                  100.0 * result->changed_fraction);
    }
    for (const auto& e : result->engines) {
      std::printf("  engine %s: %s\n", e.engine.c_str(),
                  e.status.ok() ? "ok" : e.status.ToString().c_str());
      for (const std::string& fed : e.relayed) std::printf("    %s\n", fed.c_str());
    }
    for (const std::string& url : engines) {
      std::string report;
      bool ok = wsync::VerifyEngine(url, version, expected, &report);
      std::printf("  checksums %s: %s\n", ok ? "agree" : "DISAGREE", report.c_str());
      all_ok = all_ok && ok;
    }
  }
  std::printf("%s\n",
              all_ok ? "RESULT: every engine rank holds the trainer's bytes" : "RESULT: FAILED");
  return all_ok ? 0 : 1;
}
