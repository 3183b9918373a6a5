#include "daemon/state_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

GroupRecord ARecord(const std::string& name) {
  GroupRecord r;
  r.spec.name = name;
  r.spec.device = 1;
  r.spec.engines = {{"http://e:1", 2}, {"http://[fd00::1]:30000", 1}};
  r.spec.kind = "sglang";
  r.spec.transport = "broadcast";
  r.spec.engine_options = std::make_shared<const SglangOptions>(BucketFormat::kPerTensor);
  r.engine_group = name + ".1a2b3c4d";
  r.store_port = 41234;
  r.stale_engine_groups = {name + ".0badf00d"};
  r.open_update_id = "u3";
  r.open_version = "step-3";
  r.last_version = "step-2";
  r.needs_full_version = {{"http://e:1", "left paused"}};
  return r;
}

std::string FreshDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/wsync-state-", ::getpid(), "-", name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(StateDir, RecordsSurviveAsWrittenAndAreReplacedWhole) {
  const std::string dir = FreshDir("roundtrip");
  auto state = StateDir::Open(dir + "/nested/");
  ASSERT_TRUE(state.ok()) << state.status();
  GroupRecord policy = ARecord("policy");
  ASSERT_TRUE((*state)->Save(policy).ok());
  ASSERT_TRUE((*state)->Save(ARecord("other.group")).ok());
  policy.open_version.clear();
  policy.open_update_id.clear();
  policy.needs_full_version.clear();
  ASSERT_TRUE((*state)->Save(policy).ok());  // replaces the first
  std::vector<std::string> problems;
  std::vector<GroupRecord> loaded = (*state)->LoadAll(&problems);
  EXPECT_THAT(problems, ::testing::IsEmpty());
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0], ARecord("other.group"));
  EXPECT_EQ(loaded[1], policy);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/nested/groups/policy.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir + "/nested").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/nested/groups")) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".json") << "no temporary file is left: " << e.path();
  }
  EXPECT_EQ(files, 2);
  ASSERT_TRUE((*state)->Remove("other.group").ok());
  ASSERT_TRUE((*state)->Remove("never-saved").ok());
  EXPECT_EQ((*state)->LoadAll(&problems).size(), 1u);
}

TEST(StateDir, OneWsyncdPerDirectoryAndTheRefusalNamesTheHolder) {
  const std::string dir = FreshDir("lock");
  auto first = StateDir::Open(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StateDir::Open(dir);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("state directory ", dir, " is in use by wsyncd pid ",
                                     ::getpid(), " (it holds ", dir, "/lock)")));
  EXPECT_THAT(second.status().message(), HasSubstr("--state-dir DIR"));
  first->reset();
  // The pid a holder left stays in the file; only the lock says whether it is held.
  auto third = StateDir::Open(dir);
  EXPECT_TRUE(third.ok()) << "the lock goes with the process that held it";
}

TEST(StateDir, AnOpenDirectoryIsClosedToOthers) {
  const std::string dir = FreshDir("mode");
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms(0755));
  auto state = StateDir::Open(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(StateDir, TheDefaultIsSystemdsThenXdgsThenRootsThenTheHomes) {
  StateDirEnvironment env{.state_directory = "/var/lib/wsync:/var/lib/other",
                          .xdg_state_home = "/home/u/.state/",
                          .home = "/home/u",
                          .root = true};
  auto chosen = ChooseDefaultStateDir(env);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->path, "/var/lib/wsync") << "the first of systemd's StateDirectory= list";
  EXPECT_THAT(chosen->source, HasSubstr("$STATE_DIRECTORY"));
  env.state_directory = "relative";
  EXPECT_EQ(ChooseDefaultStateDir(env)->path, "/home/u/.state/wsync");
  env.xdg_state_home = "";
  EXPECT_EQ(ChooseDefaultStateDir(env)->path, "/var/lib/wsync");
  EXPECT_EQ(ChooseDefaultStateDir(env)->source, "root's default");
  env.root = false;
  EXPECT_EQ(ChooseDefaultStateDir(env)->path, "/home/u/.local/state/wsync");
  env.home = "";
  EXPECT_THAT(ChooseDefaultStateDir(env).status().message(),
              HasSubstr("give one with --state-dir DIR (config \"state_dir\"), or run without "
                        "one with --state-dir ''"));
}

TEST(Config, AnEmptyStateDirRunsWithoutOneAndAnAbsentOneTakesTheDefault) {
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigText("{}", "absent", &config).ok());
  EXPECT_FALSE(config.state_dir.has_value());
  ASSERT_TRUE(LoadConfigText(R"({"state_dir": ""})", "empty", &config).ok());
  EXPECT_EQ(config.state_dir, "");
  auto none = OpenStateDir(std::string());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->dir, nullptr);
  EXPECT_TRUE(none->records.empty());
}

TEST(StateDir, UnreadableRecordsAreNamedAndLeftWhereTheyAre) {
  const std::string dir = FreshDir("problems");
  auto state = StateDir::Open(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE((*state)->Save(ARecord("good")).ok());
  std::ofstream(dir + "/groups/torn.json") << "{\"format\": 1, \"group\": {";
  std::ofstream(dir + "/groups/.good.json.tmp") << "half a write";
  nlohmann::json renamed = StateDir::RecordToJson(ARecord("elsewhere"));
  std::ofstream(dir + "/groups/moved.json") << renamed.dump();
  std::vector<std::string> problems;
  std::vector<GroupRecord> loaded = (*state)->LoadAll(&problems);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].spec.name, "good");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_THAT(problems[0], HasSubstr("moved.json: holds group 'elsewhere'"));
  EXPECT_THAT(problems[1], HasSubstr("torn.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/groups/torn.json"));
}

}  // namespace
}  // namespace wsync
