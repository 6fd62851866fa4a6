#include "provenance/test_tree.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/subprocess.h"

namespace q38::testing {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "_XXXXXX";
  return mkdtemp(dir.data());
}

void WriteText(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

void MakeCheckout(const std::string& dir) {
  WriteText(dir + "/common/a.cc", "int a;\n");
  WriteText(dir + "/server/b.cc", "int b;\n");
  WriteText(dir + "/docs/c.md", "docs\n");
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"git", "init", "-q"},
           {"git", "add", "."},
           {"git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree"}}) {
    absl::StatusOr<std::string> r = RunCommand(cmd, dir);
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

std::string MakeBuild(const std::string& dir, const std::string& source) {
  fs::create_directories(dir);
  BuildManifestOptions o;
  o.source_root = source;
  o.out = dir + "/" + kBuildManifestFile;
  o.toolchain = {{"compiler", "test"}};
  for (const char* name : {"q38-server", "q38-worker"}) {
    const std::string path = dir + "/" + name;
    fs::copy_file("/proc/self/exe", path);
    o.binaries.push_back(path);
  }
  absl::StatusOr<BuildManifest> m = WriteBuildManifest(o);
  EXPECT_TRUE(m.ok() && m->complete) << (m.ok() ? m->incomplete_reason : m.status().ToString());
  return dir;
}

}  // namespace q38::testing
