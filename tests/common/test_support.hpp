// Shared helpers for tests that run CSP's programs as a user would.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace csp::test {

struct RunResult {
  int status = -1;  // exit code, or -1 if killed by a signal
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

// A fresh directory removed with everything in it when the test ends.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() / ("csp-" + tag + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace csp::test
