// A child process that must not outlive the coordinator that spawned it (docs/design.md §1):
// the kernel's parent-death signal covers a parent that exits normally, EOF on a pipe inherited
// from it (whose writer lives only in the parent) covers everything else.
#pragma once

namespace q38 {

// Exits with kWorkerExitParentGone at once if the parent is no longer `parent_pid` (0: not
// checked), and later when the parent dies or `pipe_fd` (-1: none) reads EOF.
void ExitWhenParentGone(int parent_pid, int pipe_fd);

}  // namespace q38
