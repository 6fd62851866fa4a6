// The bundle end to end: q38-server started from a bundle made of this build, serving with its
// workers mapping only the bundle's libraries, and refusing every tampered bundle (each with its
// own exit code and message) before it spawns anything.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "common/config.h"
#include "common/subprocess.h"
#include "provenance/bundle.h"
#include "tests/e2e/server_harness.h"

namespace q38::e2e {
namespace {

namespace fs = std::filesystem;

std::string ReadLog(const Server& s) { return ReadFile(s.log_path()).value_or(""); }

class BundleE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // CTest runs each test in its own process, in parallel: each makes its own bundle.
    std::string parent = ::testing::TempDir() + "/e2e_bundle_XXXXXX";
    dir_ = new std::string(std::string(mkdtemp(parent.data())) + "/b");
    absl::StatusOr<Bundle> b = CreateBundle({.build_dir = Q38_BUILD_DIR, .out = *dir_});
    ASSERT_TRUE(b.ok()) << b.status();
    bundle_ = new Bundle(*std::move(b));
  }
  static void TearDownTestSuite() { fs::remove_all(fs::path(*dir_).parent_path()); }

  // A server run from the bundle, the way docs/bundle.md says.
  static ServerOptions FromBundle(std::vector<std::string> flags = {}) {
    flags.push_back("--bundle=" + *dir_);
    return {.tp = 2, .extra_flags = flags, .server_binary = *dir_ + "/bin/q38-server", .worker_binary = "",
            .env = {"LD_LIBRARY_PATH=" + *dir_ + "/lib"}};
  }
  static std::string FirstLibrary() {
    for (const BundleFile& f : bundle_->files) {
      if (f.kind == "library") return f.path;
    }
    return "";
  }

  static std::string* dir_;
  static Bundle* bundle_;
};
std::string* BundleE2E::dir_ = nullptr;
Bundle* BundleE2E::bundle_ = nullptr;

TEST_F(BundleE2E, ServesFromTheBundleWithOnlyItsLibrariesMapped) {
  Server s(FromBundle());
  ASSERT_TRUE(s.ready()) << ReadLog(s);
  grpc::ClientContext ctx;
  v1::Manifest m;
  ASSERT_TRUE(s.api().GetManifest(&ctx, {}, &m).ok());
  EXPECT_EQ(m.bundle(), bundle_->dir);
  EXPECT_EQ(m.git_commit(), bundle_->build.source.commit);
  EXPECT_EQ(m.source_fingerprint(), bundle_->build.source.fingerprint);
  ASSERT_EQ(m.workers_size(), 2);
  for (const v1::WorkerManifest& w : m.workers()) {
    EXPECT_EQ(w.executable(), bundle_->dir + "/bin/q38-worker");
    int bundled = 0;
    for (const v1::MappedObject& o : w.mapped_objects()) {
      if (IsSystemLibrary(o.path())) continue;
      EXPECT_TRUE(o.path().starts_with(bundle_->dir + "/lib/")) << o.path();
      ++bundled;
    }
    EXPECT_GT(bundled, 5);
  }
  v1::GenerateRequest req = TokensRequest({1, 2, 3}, 3);
  EXPECT_TRUE(Generate(s.api(), req).status.ok());
  EXPECT_NE(HttpGet(s.metrics_port(), "/metrics").find("git_commit=\"" + bundle_->build.source.commit + "\""), std::string::npos);
}

// Each tamper case: break the bundle, start the server, expect the refusal, repair.
struct Tamper {
  std::string name;
  std::function<void(const std::string& dir)> apply, undo;
  Refusal refusal;
  std::string words;
  std::vector<std::string> flags;
  bool from_build = false;  // run the build's q38-server instead of the bundle's
};

TEST_F(BundleE2E, RefusesEveryTamperCaseBeforeSpawningAnything) {
  const std::string lib = FirstLibrary();
  const std::string json = *ReadFile(*dir_ + "/bundle.json");
  const std::string source = fs::path(*dir_).parent_path() / "other_source";
  fs::create_directories(source + "/common");
  std::ofstream(source + "/common/x.cc") << "int x;\n";
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"git", "init", "-q"}, {"git", "add", "."}, {"git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"}}) {
    ASSERT_TRUE(RunCommand(cmd, source).ok());
  }
  auto restore_json = [&](const std::string& d) { std::ofstream(d + "/bundle.json", std::ios::trunc) << json; };
  auto restore_lib = [&](const std::string& d) {
    fs::remove(d + "/" + lib);
    fs::copy_file(bundle_->Find(lib)->origin, d + "/" + lib);
  };
  const std::string worker = *dir_ + "/bin/q38-worker";
  const std::vector<Tamper> cases = {
      {"incomplete", [&](const std::string& d) {
         std::string t = json;
         t.replace(t.rfind("\"complete\": true"), 16, "\"complete\": false");
         std::ofstream(d + "/bundle.json", std::ios::trunc) << t;
       }, restore_json, Refusal::kIncomplete, "bundle.json is not complete", {}},
      {"missing", [&](const std::string& d) { fs::remove(d + "/" + lib); }, restore_lib, Refusal::kMissingFile, lib + " is missing", {}},
      {"changed", [&](const std::string&) { std::ofstream(worker, std::ios::app) << '\n'; },
       [&](const std::string&) { fs::resize_file(worker, fs::file_size(worker) - 1); }, Refusal::kChangedFile, "bin/q38-worker changed", {}},
      {"extra", [&](const std::string& d) { std::ofstream(d + "/lib/libextra.so") << "x"; },
       [&](const std::string& d) { fs::remove(d + "/lib/libextra.so"); }, Refusal::kExtraOrReplaced,
       "lib/libextra.so is in the bundle but not in its manifest", {}},
      {"replaced", [&](const std::string& d) {
         fs::remove(d + "/" + lib);
         fs::create_symlink(bundle_->Find(lib)->origin, d + "/" + lib);
       }, restore_lib, Refusal::kExtraOrReplaced, "library " + lib + " was replaced by a link", {}},
      {"server outside", [](const std::string&) {}, [](const std::string&) {}, Refusal::kBinaryOutside,
       "q38-server runs from", {}, true},
      {"worker outside", [](const std::string&) {}, [](const std::string&) {}, Refusal::kBinaryOutside,
       "q38-worker runs from " Q38_WORKER_BIN, {"--worker_binary=" Q38_WORKER_BIN}},
      {"source changed", [](const std::string&) {}, [](const std::string&) {}, Refusal::kSourceChanged,
       "the production tree at " + source + " changed since the build", {"--source=" + source}},
  };
  for (const Tamper& t : cases) {
    t.apply(*dir_);
    ServerOptions o = FromBundle(t.flags);
    if (t.from_build) o.server_binary = Q38_SERVER_BIN;
    Server s(o);
    EXPECT_FALSE(s.ready()) << t.name;
    EXPECT_EQ(s.SignalAndWait(0), static_cast<int>(t.refusal)) << t.name << ": " << ReadLog(s);
    EXPECT_NE(ReadLog(s).find("bundle refused (" + std::string(RefusalName(t.refusal)) + "): "), std::string::npos) << t.name;
    EXPECT_NE(ReadLog(s).find(t.words), std::string::npos) << t.name << ": " << ReadLog(s);
    EXPECT_EQ(ReadLog(s).find("starting 2 worker"), std::string::npos) << t.name << ": workers were spawned";
    t.undo(*dir_);
  }
  Bundle repaired;
  EXPECT_TRUE(VerifyBundle(*dir_, "", &repaired).ok());
}

TEST_F(BundleE2E, RefusesAWorkerThatMapsALibraryNotInTheBundle) {
  Server s(FromBundle({"--worker_env=LD_PRELOAD=" Q38_PRELOAD_LIB}));
  EXPECT_FALSE(s.ready());
  EXPECT_EQ(s.SignalAndWait(0), static_cast<int>(Refusal::kForeignMappedObject)) << ReadLog(s);
  EXPECT_NE(ReadLog(s).find("maps " + fs::canonical(Q38_PRELOAD_LIB).string() + ", which is not one of the bundle's libraries"),
            std::string::npos)
      << ReadLog(s);
  EXPECT_NE(ReadLog(s).find("starting 2 worker"), std::string::npos);  // refused after they reported
}

TEST_F(BundleE2E, CliVerifiesAndRefusesWithTheSameExitCodes) {
  EXPECT_TRUE(RunCommand({Q38_CLI_BIN, "bundle", "verify", *dir_}).ok());
  std::ofstream(*dir_ + "/lib/libextra.so") << "x";
  absl::StatusOr<std::string> r = RunCommand({Q38_CLI_BIN, "bundle", "verify", *dir_});
  fs::remove(*dir_ + "/lib/libextra.so");
  EXPECT_NE(r.status().message().find("exited with code 23"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace q38::e2e
