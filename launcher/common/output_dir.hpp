// Building an output directory under a temporary sibling name and publishing it by rename, so
// that an interrupted run never leaves a half-written directory where a finished one is expected.
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/storage/publish.hpp"

namespace csp::cli {

class OutputDirError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The guard of csp-gen and csp-run outputs: only a directory of profiles (regular *.cspprof and
// *.cspbundle files, profile temporaries, perf-*.map copies) or an empty one may be replaced;
// anything else is a user's.
std::string notAMeasurementDirectory(const std::filesystem::path& existing);

class StagedDirectory {
 public:
  // Why an existing directory may not be replaced (empty: it may), checked with --force.
  using Guard = std::function<std::string(const std::filesystem::path& existing)>;
  // Fails early if `target` exists and `force` is false, or if `guard` refuses to replace it.
  // Then cleans up what interrupted runs for the same target left next to it (staging
  // directories ".NAME.tmp-PID-XXXXXX" of dead processes on this host are removed, others are
  // reported: storage::cleanupLeftovers, as for databases; see leftovers()) and creates the
  // staging directory.
  StagedDirectory(std::filesystem::path target, bool force, Guard guard = {});
  ~StagedDirectory();  // removes the staging directory unless published
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& staging() const { return staging_; }
  // What the constructor found of earlier runs: removed, or left alone with what to do.
  const std::vector<storage::LeftoverReport>& leftovers() const { return leftovers_; }
  // Replaces `target` (if any) with the staging directory.
  void publish();

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool force_;
  Guard guard_;
  bool published_ = false;
  std::vector<storage::LeftoverReport> leftovers_;
};

}  // namespace csp::cli
