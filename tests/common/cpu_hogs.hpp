// Load for tests of what must hold up on a busy machine (termination under mpirun, cleanup at a
// termination signal).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace csp::test {

// Two busy loops in shells, one per core of the test machine, for as long as the object lives.
// Tests hold one only around the part under test (std::optional): hogs for a whole test take the
// cores from the tests beside it.
class CpuHogs {
 public:
  CpuHogs() {
    for (auto& pid : pids_) {
      pid = ::fork();
      if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
        ::_exit(127);
      }
    }
  }
  ~CpuHogs() {
    for (const pid_t pid : pids_) {
      if (pid <= 0) continue;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  CpuHogs(const CpuHogs&) = delete;
  CpuHogs& operator=(const CpuHogs&) = delete;

 private:
  pid_t pids_[2] = {-1, -1};
};

}  // namespace csp::test
