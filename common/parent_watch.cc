#include "common/parent_watch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <thread>

#include "common/exit_codes.h"

namespace q38 {

void ExitWhenParentGone(int parent_pid, int pipe_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent_pid != 0 && getppid() != parent_pid) _exit(kWorkerExitParentGone);
  if (pipe_fd < 0) return;
  std::thread([pipe_fd] {
    char c;
    while (read(pipe_fd, &c, 1) != 0) {
    }
    static constexpr char kGone[] = "coordinator gone; exiting\n";
    (void)!write(STDERR_FILENO, kGone, sizeof(kGone) - 1);
    _exit(kWorkerExitParentGone);
  }).detach();
}

}  // namespace q38
