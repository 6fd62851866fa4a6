#include "provenance/bundle.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/config.h"
#include "common/sha256.h"
#include "provenance/test_tree.h"

namespace q38 {
namespace {

namespace fs = std::filesystem;
using testing::FreshDir;
using testing::WriteText;

// One source checkout and build for the suite; each test makes its own bundle to tamper with.
class BundleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = new std::string(FreshDir("src"));
    testing::MakeCheckout(*source_);
    build_ = new std::string(testing::MakeBuild(FreshDir("build"), *source_));
  }
  void SetUp() override {
    dir_ = FreshDir("bundle") + "/b";
    absl::StatusOr<Bundle> b = CreateBundle({.build_dir = *build_, .out = dir_});
    ASSERT_TRUE(b.ok()) << b.status();
    created_ = *std::move(b);
  }
  Verdict Verify(const std::string& source = "") {
    Bundle b;
    return VerifyBundle(dir_, source, &b);
  }
  const BundleFile& FirstLibrary() const {
    for (const BundleFile& f : created_.files) {
      if (f.kind == "library") return f;
    }
    ADD_FAILURE() << "no library bundled";
    return created_.files[0];
  }
  void EditBundleJson(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(*ReadFile(dir_ + "/bundle.json"));
    edit(j);
    WriteText(dir_ + "/bundle.json", j.dump());
  }
  static void ExpectRefused(const Verdict& v, Refusal r, const std::string& words) {
    EXPECT_EQ(v.refusal, r) << v.message;
    EXPECT_EQ(v.exit_code(), static_cast<int>(r));
    EXPECT_NE(v.message.find(words), std::string::npos) << v.message;
  }

  static std::string* source_;
  static std::string* build_;
  std::string dir_;
  Bundle created_;
};
std::string* BundleTest::source_ = nullptr;
std::string* BundleTest::build_ = nullptr;

TEST_F(BundleTest, CarriesTheBinariesTheirLibrariesAndTheManifests) {
  Bundle b;
  Verdict v = VerifyBundle(dir_, *source_, &b);
  ASSERT_TRUE(v.ok()) << v.message;
  EXPECT_TRUE(b.complete);
  EXPECT_EQ(b.Find("bin/q38-worker")->sha256, *Sha256File(*build_ + "/q38-worker"));
  EXPECT_EQ(b.Find("bin/q38-worker")->built_sha256, b.Find("bin/q38-worker")->sha256);
  bool crypto = false;
  for (const BundleFile& f : b.files) {
    EXPECT_FALSE(IsSystemLibrary(f.path)) << f.path;
    crypto |= f.path.starts_with("lib/libcrypto.so");  // the test binary links OpenSSL
    if (f.kind == "library") {
      EXPECT_EQ(f.sha256, *Sha256File(f.origin)) << f.path;
    }
  }
  EXPECT_TRUE(crypto);
  EXPECT_TRUE(fs::exists(dir_ + "/build_manifest.json"));
  EXPECT_EQ(CreateBundle({.build_dir = *build_, .out = dir_}).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(BundleTest, StrippedBinariesStillTraceToTheBuild) {
  const std::string stripped = FreshDir("stripped") + "/b";
  absl::StatusOr<Bundle> b = CreateBundle({.build_dir = *build_, .out = stripped, .strip_debug = true});
  ASSERT_TRUE(b.ok()) << b.status();
  const BundleFile* worker = b->Find("bin/q38-worker");
  EXPECT_TRUE(worker->stripped);
  EXPECT_EQ(worker->built_sha256, *Sha256File(*build_ + "/q38-worker"));
  Bundle verified;
  EXPECT_TRUE(VerifyBundle(stripped, "", &verified).ok());
}

TEST_F(BundleTest, RefusesAnIncompleteManifest) {
  EditBundleJson([](nlohmann::json& j) { j["complete"] = false; });
  ExpectRefused(Verify(), Refusal::kIncomplete, "bundle.json is not complete");
  fs::remove(dir_ + "/bundle.json");
  ExpectRefused(Verify(), Refusal::kIncomplete, "no bundle.json");
}

TEST_F(BundleTest, RefusesAnIncompleteBuildManifest) {
  nlohmann::json build = nlohmann::json::parse(*ReadFile(dir_ + "/build_manifest.json"));
  build["complete"] = false;
  build["incomplete_reason"] = "sources changed";
  WriteText(dir_ + "/build_manifest.json", build.dump());
  EditBundleJson([&](nlohmann::json& j) { j["build_manifest_sha256"] = Sha256Hex(build.dump()); });
  ExpectRefused(Verify(), Refusal::kIncomplete, "the build manifest is incomplete: sources changed");
}

TEST_F(BundleTest, RefusesAMissingFile) {
  fs::remove(dir_ + "/" + FirstLibrary().path);
  ExpectRefused(Verify(), Refusal::kMissingFile, FirstLibrary().path + " is missing");
}

TEST_F(BundleTest, RefusesAChangedFile) {
  std::ofstream(dir_ + "/bin/q38-worker", std::ios::app) << '\n';
  ExpectRefused(Verify(), Refusal::kChangedFile, "bin/q38-worker changed");
}

TEST_F(BundleTest, RefusesABinaryTheBuildDidNotMake) {
  // Consistent hashes in bundle.json, but not the build's binary.
  std::ofstream(dir_ + "/bin/q38-worker", std::ios::app) << '\n';
  const std::string sha = *Sha256File(dir_ + "/bin/q38-worker");
  EditBundleJson([&](nlohmann::json& j) {
    for (auto& f : j["files"]) {
      if (f["path"] == "bin/q38-worker") f["sha256"] = sha;
    }
  });
  ExpectRefused(Verify(), Refusal::kChangedFile, "bin/q38-worker is not the binary the build manifest records");
}

TEST_F(BundleTest, RefusesAnExtraLibrary) {
  WriteText(dir_ + "/lib/libextra.so", "\x7f" "ELF");
  ExpectRefused(Verify(), Refusal::kExtraOrReplaced, "lib/libextra.so is in the bundle but not in its manifest");
}

TEST_F(BundleTest, RefusesALibraryReplacedByALink) {
  const BundleFile& lib = FirstLibrary();
  fs::remove(dir_ + "/" + lib.path);
  fs::create_symlink(lib.origin, dir_ + "/" + lib.path);  // same bytes, but not the bundle's file
  ExpectRefused(Verify(), Refusal::kExtraOrReplaced, "library " + lib.path + " was replaced by a link to " + lib.origin);
}

TEST_F(BundleTest, RefusesABinaryOutsideTheBundle) {
  EditBundleJson([](nlohmann::json& j) {
    for (auto& f : j["files"]) {
      if (f["path"] == "bin/q38-worker") f["path"] = "../elsewhere/q38-worker";
    }
  });
  ExpectRefused(Verify(), Refusal::kBinaryOutside, "../elsewhere/q38-worker lies outside the bundle");
  // A binary linked to one outside resolves outside too.
  SetUp();
  fs::remove(dir_ + "/bin/q38-server");
  fs::create_symlink(*build_ + "/q38-server", dir_ + "/bin/q38-server");
  ExpectRefused(Verify(), Refusal::kBinaryOutside, "bin/q38-server lies outside the bundle");
}

TEST_F(BundleTest, RefusesARunningBinaryOutsideTheBundle) {
  EXPECT_TRUE(CheckBundledExecutable(created_, "q38-worker", dir_ + "/bin/q38-worker").ok());
  ExpectRefused(CheckBundledExecutable(created_, "q38-worker", *build_ + "/q38-worker"), Refusal::kBinaryOutside,
                "q38-worker runs from " + *build_ + "/q38-worker");
}

TEST_F(BundleTest, RefusesAChangedSourceTree) {
  EXPECT_TRUE(Verify(*source_).ok());
  WriteText(*source_ + "/server/b.cc", "int b_changed;\n");
  ExpectRefused(Verify(*source_), Refusal::kSourceChanged, "changed since the build (1 files: server/b.cc)");
  WriteText(*source_ + "/server/b.cc", "int b;\n");
  ExpectRefused(Verify(FreshDir("not_a_checkout")), Refusal::kSourceChanged, "not a git checkout");
}

TEST_F(BundleTest, RefusesAProcessMappingALibraryThatIsNotTheBundles) {
  const BundleFile& lib = FirstLibrary();
  const std::vector<MappedObject> good = {{dir_ + "/" + lib.path, lib.sha256}, {"/usr/lib/x86_64-linux-gnu/libc.so.6", "any"}};
  EXPECT_TRUE(CheckMappedObjects(created_, "rank 1", good).ok());
  ExpectRefused(CheckMappedObjects(created_, "rank 1", {{lib.origin, lib.sha256}}), Refusal::kForeignMappedObject,
                "rank 1 maps " + lib.origin + ", which is not one of the bundle's libraries");
  ExpectRefused(CheckMappedObjects(created_, "rank 2", {{dir_ + "/" + lib.path, "0000"}}), Refusal::kForeignMappedObject,
                "with SHA-256 0000");
}

TEST(SystemLibraries, AreTheCLibrarysAndTheDriversOnly) {
  for (const char* p : {"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                        "/usr/lib/x86_64-linux-gnu/libnss_files.so.2", "/usr/lib/x86_64-linux-gnu/gconv/UTF-16.so",
                        "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}) {
    EXPECT_TRUE(IsSystemLibrary(p)) << p;
  }
  for (const char* p : {"/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/libcudart.so.12", "/b/lib/libglog.so.1", "/x/libcrypto.so.3"}) {
    EXPECT_FALSE(IsSystemLibrary(p)) << p;
  }
}

}  // namespace
}  // namespace q38
