// csp-prof-mpi as a library call: the pipeline (pipeline.hpp), summary accumulation, and the
// parallel database write with atomic publication. Collective over the communicator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "csp/reduce/pipeline.hpp"
#include "csp/storage/database.hpp"

namespace csp::reduce {

struct ProfOptions {
  PipelineOptions pipeline;
  std::filesystem::path output;
  bool force = false;
  std::string title;  // free description stored in the database
};

struct ProfSummary {
  std::uint64_t inputs = 0;
  std::uint32_t profiles = 0;
  std::vector<SkippedInput> skipped;
  std::uint32_t cctNodes = 0;
  std::size_t metrics = 0;
  std::uint32_t regions = 0;
  std::uint64_t valuesWritten = 0;  // distinct non-zero per-thread values (each is stored in both orders)
  std::uint64_t databaseBytes = 0;
  std::vector<PhaseTime> phases;    // rank 0's
  AttributionStats attribution;     // rank 0's
  storage::SamplingQuality quality; // sum over all profiles (rank 0)
};

// The warnings csp-prof-mpi prints about sampling quality: one line each for truncated and
// dropped samples above storage::kQualityWarningShare of all samples; empty when it is fine.
std::vector<std::string> qualityWarnings(const storage::SamplingQuality& total);

// Throws PipelineError (the same on every rank) for bad input or output; the target is then
// untouched and no temporary directory is left behind.
ProfSummary runProf(const Comm& comm, const ProfOptions& options, ProgressSink* progress = nullptr);

}  // namespace csp::reduce
