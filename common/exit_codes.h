// Process exit codes: one per cause, so an operator (and systemd's RestartPreventExitStatus) can
// tell a fault worth retrying from one that a restart cannot fix. docs/operations.md has the table.
#pragma once

namespace q38 {

// q38-server.
enum ServerExit : int {
  kExitStopped = 0,          // graceful stop (SIGTERM, SIGINT, Admin.Shutdown)
  kExitBadFlags = 1,         // flags or the contract file
  kExitWorkersNotStarted = 2,  // a worker did not come up in time or died starting (retry may help)
  kExitGroupMismatch = 3,    // ranks missing or duplicated, different builds, models or libraries
  kExitWorkerFailed = 4,     // a worker died or hung and the policy (or the restarts left) says exit
  kExitContract = 5,         // the workers deviate from --contract
  kExitModelRefused = 6,     // config.json, generation_config.json, the tokenizer or a checkpoint file
  kExitCannotServe = 7,      // the listening ports, TLS files, API key file or run directory
  // 20-26: the bundle is refused (provenance/bundle.h).
};

// q38-worker: the checkpoint itself is refused (as opposed to the device or the group failing), so
// the coordinator exits kExitModelRefused rather than retrying.
inline constexpr int kWorkerExitModelRefused = 10;
// q38-worker (and the tests' fake worker): the coordinator that spawned it is gone.
inline constexpr int kWorkerExitParentGone = 4;

}  // namespace q38
