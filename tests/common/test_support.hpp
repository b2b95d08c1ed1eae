// Shared helpers for tests that run CSP's programs as a user would.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"

namespace csp::test {

struct RunResult {
  int status = -1;     // exit code, or -1 if killed by a signal
  std::string output;  // stdout and stderr together
};

inline RunResult run(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  RunResult r;
  if (!pipe) return r;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) r.output.append(buf.data(), n);
  const int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string tool(const std::string& name) { return std::string(CSP_BINARY_DIR) + "/launcher/" + name; }

// mpirun with what this machine needs: root allowed, more ranks than cores allowed.
inline std::string mpirun(int ranks) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return "mpirun --oversubscribe -np " + std::to_string(ranks) + " ";
}

// Inputs that several tests share: ctest runs every test case in a process of its own, so a
// suite's SetUpTestSuite would build them once per case. sharedInput builds the directory
// CSP_BINARY_DIR/test-shared/NAME-STAMP once, under a lock, by whichever test needs it first, and
// hands the others the finished directory. STAMP follows the modification times of the tools
// that build such inputs, so that a rebuilt tool never serves inputs of the old one. ctest
// removes test-shared before and after a run (the CTest fixture csp_shared_inputs,
// tests/CMakeLists.txt). `build` fills the directory and returns whether it succeeded (a failed
// build leaves nothing; the next test tries again).
inline std::filesystem::path sharedInput(const std::string& name,
                                         const std::function<bool(const std::filesystem::path&)>& build) {
  namespace fs = std::filesystem;
  long long stamp = 0;
  for (const char* t : {"csp-gen", "csp-prof-mpi", "csp-run"}) {
    std::error_code ec;
    const auto when = fs::last_write_time(tool(t), ec);
    if (!ec) stamp ^= static_cast<long long>(when.time_since_epoch().count()) * 31;
  }
  const fs::path root = fs::path(CSP_BINARY_DIR) / "test-shared";
  fs::create_directories(root);
  const fs::path dir = root / (name + "-" + std::to_string(stamp & 0x7fffffffffffLL));
  const int lock = ::open((dir.string() + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  const fs::path done = dir / ".complete";
  if (!fs::exists(done)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    if (build(dir)) {
      std::ofstream(done) << "complete\n";
    } else {
      fs::remove_all(dir);
    }
  }
  if (lock >= 0) ::close(lock);  // releases the lock
  return dir;
}

// Scratch directories that live until the test program ends (a measurement shared by a test's
// steps): `scratchDir("clock-skew")` is CSP_BINARY_DIR/tests/measure/scratch-clock-skew, emptied
// now. Only the directories this process made are removed at its end: ctest runs a program's tests
// as parallel processes, and sweeping every scratch-* directory removed a running test's
// measurement directory under it (profiles "lost" in CI).
inline std::vector<std::filesystem::path>& madeScratch() {
  static std::vector<std::filesystem::path> dirs;
  return dirs;
}
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const auto& dir : madeScratch()) std::filesystem::remove_all(dir, ec);
  }
};
inline std::filesystem::path scratchDir(const std::string& name) {
  static const auto* const cleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);
  (void)cleanup;
  const auto dir = std::filesystem::path(CSP_BINARY_DIR) / "tests" / "measure" / ("scratch-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  madeScratch().push_back(dir);
  return dir;
}

}  // namespace csp::test
