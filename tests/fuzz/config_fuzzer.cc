// Fuzzes the JSON files wsyncd reads: its config file (LoadConfigText, as LoadConfigFile calls
// it, with the groups' specs, byte sizes, engine_networks and the engine URLs in it) and the
// group records of its state directory (StateDir::RecordFromJson), which are read back after a
// crash.
//
// Input: the file's text.
//
// Invariants: nothing throws and nothing is undefined (the sanitizers watch); a config that
// loads has the flags' bounds (1..64 slots, timeouts above zero), valid groups of at most 128
// ranks, and groups whose spec survives being written as a record and read back unchanged, and
// engine_networks that can be built without a DNS lookup; a record that loads survives the same
// round trip.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/state_dir.h"
#include "tests/fuzz/fuzz_check.h"

namespace wsync {
namespace {

const HostResolver kNoLookup = [](const std::string&) -> absl::StatusOr<std::vector<IpAddress>> {
  return absl::UnavailableError("not looked up");
};

void CheckGroupRoundTrip(const GroupSpec& spec) {
  const nlohmann::json written = GroupSpecToJson(spec);
  auto read = GroupSpecFromJson(written);
  FUZZ_CHECK(read.ok(), absl::StrCat(written.dump(), ": ", read.status().ToString()));
  FUZZ_CHECK(GroupSpecToJson(*read) == written, written.dump());
}

void FuzzConfig(const std::string& text) {
  DaemonConfig config;
  if (!LoadConfigText(text, "fuzz.json", &config).ok()) return;
  FUZZ_CHECK(config.daemon.slots_per_device >= 1 && config.daemon.slots_per_device <= 64,
             absl::StrCat(config.daemon.slots_per_device, " slots"));
  for (absl::Duration d :
       {config.daemon.bucket_timeout, config.daemon.lease, config.daemon.group.timeouts.control}) {
    FUZZ_CHECK(d > absl::ZeroDuration(), absl::FormatDuration(d));
  }
  for (const GroupSpec& g : config.groups) {
    if (ValidateGroupSpec(g).ok()) {
      uint64_t ranks = 1;
      for (const EngineSpec& e : g.engines) ranks += e.ranks;
      FUZZ_CHECK(ranks <= 128, absl::StrCat("a valid group of ", ranks, " ranks"));
    }
    CheckGroupRoundTrip(g);
  }
  auto networks = EngineNetworksFor(config);
  if (!networks.ok()) return;
  for (const GroupSpec& g : config.groups) {
    for (const EngineSpec& e : g.engines) {
      auto url = ParseHttpUrl(e.url);
      if (url.ok()) (void)networks->Check(url->host, kNoLookup);
    }
  }
}

void FuzzRecord(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  auto record = StateDir::RecordFromJson(j);
  if (!record.ok()) return;
  const nlohmann::json written = StateDir::RecordToJson(*record);
  auto again = StateDir::RecordFromJson(written);
  FUZZ_CHECK(again.ok(), absl::StrCat(written.dump(), ": ", again.status().ToString()));
  FUZZ_CHECK(StateDir::RecordToJson(*again) == written, written.dump());
}

}  // namespace
}  // namespace wsync

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  wsync::FuzzConfig(text);
  wsync::FuzzRecord(text);
  if (size <= 64) (void)wsync::ParseByteSize(text);
  return 0;
}
