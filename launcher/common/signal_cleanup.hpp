// Removing a temporary directory when the process is told to stop.
//
// Termination signals (SIGTERM from a batch system's time limit or from mpirun when a peer died,
// SIGINT, SIGHUP, SIGXCPU) remove the registered directory from inside the handler, with
// async-signal-safe system calls only, then terminate the process with the same signal. A
// watchdog thread can also end the process when its launcher vanished (mpirun killed with
// SIGKILL leaves its ranks behind otherwise).
#pragma once

#include <filesystem>

namespace csp::cli {

// Installs the termination handlers; `tool` prefixes the one line the handler prints when
// `report` is set.
void installTerminationCleanup(const char* tool, bool report);
// The directory to remove on termination (replaces any earlier one; empty path: none). With
// `ownerPid` (a process of this host that may still create files in it), the handler does not
// let this process die before that one is gone too (bounded): under mpirun every death hastens
// the SIGKILL of the others, and the owner killed first leaves what it created meanwhile.
void removeOnTermination(const std::filesystem::path& dir, int ownerPid = 0);
// Removes `dir` recursively without allocating (usable in a signal handler); ignores errors.
void removeTreeNoAlloc(const char* dir);

// Polls the parent process id; when it changes (the launcher died), removes the registered
// directory, prints one line and exits with status 1. Stops when destroyed.
class OrphanWatchdog {
 public:
  explicit OrphanWatchdog(const char* tool);
  ~OrphanWatchdog();
  OrphanWatchdog(const OrphanWatchdog&) = delete;
  OrphanWatchdog& operator=(const OrphanWatchdog&) = delete;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace csp::cli
