// Building an output directory under a temporary sibling name and publishing it by rename, so
// that an interrupted run never leaves a half-written directory where a finished one is expected.
#pragma once

#include <filesystem>
#include <stdexcept>

namespace csp::cli {

class OutputDirError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StagedDirectory {
 public:
  // Fails early if `target` exists and `force` is false.
  StagedDirectory(std::filesystem::path target, bool force);
  ~StagedDirectory();  // removes the staging directory unless published
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& staging() const { return staging_; }
  // Replaces `target` (if any) with the staging directory.
  void publish();

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool force_;
  bool published_ = false;
};

}  // namespace csp::cli
