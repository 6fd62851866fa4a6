// A group of q38-fake-worker ranks under a real Supervisor, for the coordinator's unit tests: a
// fresh run directory, the behaviour script (fake_worker_spec.h) in the workers' environment, and
// what each rank recorded. Tests that use it define Q38_FAKE_WORKER_BIN (server/CMakeLists.txt).
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/supervisor.h"
#include "server/testing/fake_worker_spec.h"

namespace q38::fake {

// Polls `done` every 10 ms for up to `timeout`: for states that nothing signals to a test.
inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  for (const auto until = std::chrono::steady_clock::now() + timeout;; std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
  }
}

class FakeGroup {
 public:
  // `behaviour` is the Q38_FAKE_WORKER script; `on_death` as the Supervisor's.
  FakeGroup(int tp, const std::string& behaviour,
            Supervisor::DeathCallback on_death = [](int, const std::string&, int) {})
      : dir_(MakeDir()), supervisor_(Options(tp, behaviour, dir_), std::move(on_death)) {
    // Supervisor::Start's GetInfo fails fast while a rank's socket is not there yet, so nothing
    // polls the retried connection but gRPC's backup poller, every 5 s by default: each start
    // would take 5 s. Polling often keeps these tests fast (set the variable to see the delay).
    setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "20", /*overwrite=*/0);
  }
  ~FakeGroup() {
    supervisor_.KillAll();
    std::filesystem::remove_all(dir_);
  }

  Supervisor& supervisor() { return supervisor_; }

  // The lines rank `rank` recorded, in order ("run ID", "cancel ID BY", "hang ID",
  // "end ID REASON", "shutdown"; the reasons by proto/enum_names.h).
  std::vector<std::string> Events(int rank) const {
    std::ifstream in(absl::StrCat(dir_, "/rank", rank, ".sock.events"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  bool Recorded(int rank, const std::string& line) const {
    const std::vector<std::string> events = Events(rank);
    return std::find(events.begin(), events.end(), line) != events.end();
  }

 private:
  static std::string MakeDir() {
    std::string dir = ::testing::TempDir() + "/fake_group_XXXXXX";
    return mkdtemp(dir.data());
  }
  static SupervisorOptions Options(int tp, const std::string& behaviour, const std::string& dir) {
    SupervisorOptions o;
    o.worker_binary = Q38_FAKE_WORKER_BIN;
    o.model = "fake";
    o.run_dir = dir;
    o.tp = tp;
    o.env = {absl::StrCat(kBehaviourEnv, "=", behaviour)};
    return o;
  }

  std::string dir_;
  Supervisor supervisor_;
};

}  // namespace q38::fake
