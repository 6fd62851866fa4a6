#include "server/run_dir.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace q38 {
namespace {

// A process's start time in clock ticks since boot (field 22 of /proc/PID/stat), "" when it is gone:
// with the pid it names one process, however pids are reused.
std::string StartTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return "";
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  return fields.size() > 19 ? fields[19] : "";  // fields from 3 on
}

}  // namespace

absl::StatusOr<RunDir> RunDir::Create(const std::string& requested) {
  std::string path = requested;
  if (path.empty()) {
    path = "/tmp/q38-run-XXXXXX";
    if (mkdtemp(path.data()) == nullptr) return absl::UnavailableError("cannot create a run directory in /tmp");
  }
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create the run directory ", path, ": ", ec.message()));
  std::ofstream(path + "/owner") << getpid() << " " << StartTime(getpid()) << "\n";
  return RunDir(path);
}

RunDir::~RunDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int RemoveStaleRunDirs(const std::string& parent) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    if (!entry.is_directory(ec) || entry.path().filename().string().rfind("q38-run-", 0) != 0) continue;
    std::ifstream in(entry.path() / "owner");
    pid_t pid = 0;
    std::string start;
    if (!(in >> pid >> start)) continue;  // not ours to judge
    if (StartTime(pid) == start) continue;  // its owner still runs
    std::filesystem::remove_all(entry.path(), ec);
    removed += ec ? 0 : 1;
  }
  return removed;
}

}  // namespace q38
