#include "daemon/engines/engine_version.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

EngineVersion Parsed(const std::string& text) {
  auto v = ParseEngineVersion(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : EngineVersion{};
}

TEST(EngineVersionTest, ReadsPep440PreReleasesInEverySpelling) {
  struct Case {
    const char* text;
    const char* pre;
  };
  for (const Case& c :
       {Case{"0.11.1rc2", "rc2"}, Case{"0.11.1.rc2", "rc2"}, Case{"0.11.1-rc.2", "rc2"},
        Case{"0.11.1c2", "rc2"}, Case{"0.11.1pre2", "rc2"}, Case{"0.11.1preview2", "rc2"},
        Case{"0.11.1a1", "a1"}, Case{"0.11.1alpha1", "a1"}, Case{"0.11.1b3", "b3"},
        Case{"0.11.1.beta3", "b3"}, Case{"0.11.1RC2", "rc2"}, Case{"0.11.1rc", "rc0"}}) {
    EngineVersion v = Parsed(c.text);
    EXPECT_EQ(v.pre, c.pre) << c.text;
    EXPECT_TRUE(v.prerelease) << c.text;
    EXPECT_TRUE(v.vendor.empty()) << c.text << ": " << v.vendor;
    EXPECT_EQ(v.Release(), "0.11.1") << c.text;
    EXPECT_FALSE(v.AtLeast(0, 11, 1)) << c.text;
    EXPECT_TRUE(v.AtLeast(0, 11, 0)) << c.text;
  }
}

TEST(EngineVersionTest, ReadsNightlyBuildsAsPreReleasesOfTheirRelease) {
  EngineVersion v = Parsed("0.11.1rc2.dev123+gabc1234");
  EXPECT_EQ(v.pre, "rc2");
  EXPECT_EQ(v.dev, 123);
  EXPECT_EQ(v.local, "gabc1234");
  EXPECT_TRUE(v.vendor.empty());
  EXPECT_TRUE(v.prerelease);
  EXPECT_EQ(v.Described(),
            "0.11.1rc2.dev123+gabc1234, a pre-release of 0.11.1 (rc2, dev123, build gabc1234)");
  EngineVersion dev = Parsed("0.10.2.dev5");
  EXPECT_EQ(dev.dev, 5);
  EXPECT_TRUE(dev.prerelease);
  EXPECT_EQ(dev.Described(), "0.10.2.dev5, a pre-release of 0.10.2 (dev5)");
}

TEST(EngineVersionTest, PostReleasesAndLocalBuildsAreTheirRelease) {
  for (const char* text : {"0.5.6.post1", "0.5.6-post1", "0.5.6post1", "0.5.6.rev1", "0.5.6-1",
                           "0.5.6.post1.dev2", "0.5.6+cu130", "0.5.6.post1+cu128"}) {
    EngineVersion v = Parsed(text);
    EXPECT_FALSE(v.prerelease) << text;
    EXPECT_TRUE(v.AtLeast(0, 5, 6)) << text;
    EXPECT_FALSE(v.AtLeast(0, 5, 7)) << text;
  }
  EXPECT_EQ(Parsed("0.5.6-1").post, 1);
  EXPECT_EQ(Parsed("0.5.6.post1").Described(), "0.5.6.post1, a post release of 0.5.6");
  EXPECT_EQ(Parsed("0.23.0+cu130").Described(), "0.23.0+cu130, a build of 0.23.0 (build cu130)");
  EXPECT_EQ(Parsed("0.5.6").Described(), "0.5.6");
}

TEST(EngineVersionTest, AVendorSuffixIsAPreReleaseThatSaysSo) {
  EngineVersion v = Parsed("0.17.0-sim");
  EXPECT_EQ(v.vendor, "-sim");
  EXPECT_TRUE(v.prerelease);
  EXPECT_FALSE(v.AtLeast(0, 17, 0));
  EXPECT_EQ(v.Described(), "0.17.0-sim, a pre-release of 0.17.0 (vendor suffix '-sim')");
  // A word that only starts like a PEP 440 one is a vendor suffix whole.
  EXPECT_EQ(Parsed("0.5.6-release").vendor, "-release");
  EXPECT_EQ(Parsed("0.5.6.postfix").vendor, ".postfix");
  EXPECT_EQ(Parsed("0.5.6.post1rc1").vendor, "rc1");
  EXPECT_TRUE(Parsed("0.5.6.post1rc1").prerelease);
}

TEST(EngineVersionTest, ReadsDatedDevBuildsExtraReleasePartsAndACapitalV) {
  EngineVersion dated = Parsed("0.5.6.post1.dev20251125");
  EXPECT_EQ(dated.post, 1);
  EXPECT_EQ(dated.dev, 20251125);
  EXPECT_TRUE(dated.vendor.empty());
  EXPECT_FALSE(dated.prerelease) << "a dev build of a post release comes after its release";
  EngineVersion four = Parsed("0.5.6.1");
  EXPECT_EQ(four.Release(), "0.5.6");
  EXPECT_FALSE(four.prerelease);
  EXPECT_TRUE(four.AtLeast(0, 5, 6));
  EXPECT_FALSE(four.AtLeast(0, 5, 7));
  EXPECT_EQ(Parsed("V0.5.6").Release(), "0.5.6");
  // A part longer than any engine's leaves digits unread: a vendor suffix, so never served as
  // its release.
  EXPECT_TRUE(Parsed("0.5.6.1234567").prerelease);
}

TEST(EngineVersionTest, AVersionWithoutPatchTakesItsSuffixAfterTheMinor) {
  EngineVersion dev = Parsed("0.5.dev3");
  EXPECT_EQ(dev.Release(), "0.5.0");
  EXPECT_EQ(dev.dev, 3);
  EXPECT_TRUE(dev.prerelease);
  EXPECT_FALSE(Parsed("0.5.post1").prerelease);
  EXPECT_EQ(Parsed("v1.2").Release(), "1.2.0");
}

TEST(EngineVersionTest, TheGroupOptionTakesAPlainReleaseOnlyAndNamesItsKind) {
  EXPECT_TRUE(ParseEngineVersionOption("vllm", "0.17.0").ok());
  for (const char* bad : {"0.17.0rc1", "0.17", "v0.17.0", "0.17.0+cu130", "0.17.0.post1",
                          "0.17.0-sim", "", "latest"}) {
    auto v = ParseEngineVersionOption("vllm", bad);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(v.status().message(), ::testing::HasSubstr("vllm option \"engine_version\""));
  }
}

TEST(EngineVersionTest, GatesReadTheGroupOptionAndSayWhatTheEngineReported) {
  const EngineVersion reported = Parsed("0.17.0-sim");
  EXPECT_FALSE(reported.AtLeast(0, 17, 0));
  EXPECT_TRUE(reported.ReleaseAtLeast(0, 17, 0));
  EXPECT_FALSE(reported.ReleaseAtLeast(0, 17, 1));
  EXPECT_EQ(GateVersion(reported, nullptr).text, "0.17.0-sim");
  const EngineVersion forced = *ParseEngineVersionOption("vllm", "0.17.0");
  const EngineVersion read = GateVersion(reported, &forced);
  EXPECT_TRUE(read.AtLeast(0, 17, 0));
  EXPECT_EQ(read.text, "0.17.0-sim, read as 0.17.0 (the group's engine_version)");
  EXPECT_EQ(EngineVersionOverrideHint(reported),
            "; if this build has what 0.17.0 ships, create the group with --option "
            "engine_version=0.17.0 (the config's \"engine_version\") to have it read as that "
            "release");
  EXPECT_THAT(EngineVersionOverrideHint(Parsed("0.16.0")),
              ::testing::HasSubstr("--option engine_version=MAJOR.MINOR.PATCH"));
}

}  // namespace
}  // namespace wsync
