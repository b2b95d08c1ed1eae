// Progress output for long phases: a redrawn bar on a terminal, occasional plain lines in
// batch logs (so that a Slurm output file stays readable).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace csp::cli {

class Progress {
 public:
  Progress(std::string phase, std::uint64_t total, bool enabled = true);
  void update(std::uint64_t done);
  void finish();  // prints the final state and the phase's duration
  double seconds() const;

 private:
  std::string phase_;
  std::uint64_t total_;
  bool enabled_;
  bool terminal_;
  bool finished_ = false;
  int lastPercent_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastLine_;
};

}  // namespace csp::cli
