#include "provenance/build_manifest.h"

#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/config.h"
#include "common/sha256.h"
#include "provenance/test_tree.h"

namespace q38 {
namespace {

using testing::FreshDir;
using testing::MakeCheckout;
using testing::WriteText;

TEST(SourceTree, HashesEveryTrackedProductionFileAndNothingElse) {
  const std::string src = FreshDir("tree");
  MakeCheckout(src);
  WriteText(src + "/common/untracked.cc", "x");
  absl::StatusOr<SourceTree> t = FingerprintSourceTree(src);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->commit.size(), 40u);
  ASSERT_EQ(t->files.size(), 2u);
  EXPECT_EQ(t->files.at("common/a.cc"), Sha256Hex("int a;\n"));
  EXPECT_EQ(t->fingerprint, Sha256Hex("common/a.cc " + Sha256Hex("int a;\n") + "\nserver/b.cc " + Sha256Hex("int b;\n") + "\n"));

  // Content, not the commit: an uncommitted edit changes the fingerprint and names the file.
  WriteText(src + "/server/b.cc", "int b2;\n");
  absl::StatusOr<SourceTree> edited = FingerprintSourceTree(src);
  ASSERT_TRUE(edited.ok());
  EXPECT_NE(edited->fingerprint, t->fingerprint);
  EXPECT_EQ(ChangedFiles(*t, *edited), std::vector<std::string>{"server/b.cc"});
  // Docs are not production sources.
  WriteText(src + "/docs/c.md", "other\n");
  EXPECT_EQ(FingerprintSourceTree(src)->fingerprint, edited->fingerprint);
}

TEST(SourceTree, MissingTrackedFileOrNoCheckoutIsAnError) {
  const std::string src = FreshDir("tree");
  MakeCheckout(src);
  std::filesystem::remove(src + "/common/a.cc");
  absl::StatusOr<SourceTree> t = FingerprintSourceTree(src);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("common/a.cc"), std::string::npos) << t.status();
  EXPECT_EQ(FingerprintSourceTree(FreshDir("empty")).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BuildManifest, CompleteWithBinaryHashesAndRoundTrips) {
  const std::string src = FreshDir("tree");
  MakeCheckout(src);
  const std::string build = testing::MakeBuild(FreshDir("build"), src);
  absl::StatusOr<BuildManifest> m = ParseBuildManifest(*ReadFile(build + "/build_manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->complete);
  EXPECT_EQ(m->source.fingerprint, FingerprintSourceTree(src)->fingerprint);
  ASSERT_EQ(m->binaries.size(), 2u);
  EXPECT_EQ(m->binaries[1].name, "q38-worker");
  EXPECT_EQ(m->binaries[1].sha256, *Sha256File(build + "/q38-worker"));
  EXPECT_EQ(m->toolchain.at("compiler"), "test");
  EXPECT_EQ(BuildManifestJson(*m), BuildManifestJson(*ParseBuildManifest(BuildManifestJson(*m).dump())));
}

TEST(BuildManifest, SourcesEditedAfterTheBuildBeganLeaveItIncomplete) {
  const std::string src = FreshDir("tree");
  MakeCheckout(src);
  const std::string build = FreshDir("build");
  const std::string stamp = build + "/build_start.stamp";
  WriteText(stamp, "");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  WriteText(src + "/common/a.cc", "int a_edited_mid_build;\n");
  WriteText(build + "/bin", "binary");
  absl::StatusOr<BuildManifest> m =
      WriteBuildManifest({.source_root = src, .out = build + "/m.json", .started_stamp = stamp, .binaries = {build + "/bin"}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->complete);
  EXPECT_NE(m->incomplete_reason.find("production sources changed during the build: common/a.cc"), std::string::npos) << m->incomplete_reason;
  EXPECT_FALSE(ParseBuildManifest(*ReadFile(build + "/m.json"))->complete);

  // Not a checkout: written, incomplete, with the reason.
  absl::StatusOr<BuildManifest> none = WriteBuildManifest({.source_root = FreshDir("empty"), .out = build + "/n.json", .binaries = {build + "/bin"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->complete);
  EXPECT_NE(none->incomplete_reason.find("not a git checkout"), std::string::npos);
}

TEST(BuildManifest, ParseNamesTheBadField) {
  EXPECT_NE(ParseBuildManifest("[]").status().message().find("not a JSON object"), std::string::npos);
  absl::StatusOr<BuildManifest> m = ParseBuildManifest(R"({"format": "q38.build_manifest/1", "source_root": 3})");
  EXPECT_EQ(m.status().message(), "build manifest: source_root: must be a string");
  nlohmann::json j = BuildManifestJson(BuildManifest{.source = {.commit = "c", .files = {{"a", "1"}}, .fingerprint = "wrong"}});
  EXPECT_NE(ParseBuildManifest(j.dump()).status().message().find("source_fingerprint: does not match"), std::string::npos);
}

}  // namespace
}  // namespace q38
