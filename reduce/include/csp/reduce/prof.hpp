// csp-prof-mpi as a library call: the pipeline (pipeline.hpp), summary accumulation, and the
// parallel database write with atomic publication. Collective over the communicator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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
  // Rank 0: what the builder found of earlier interrupted builds of the same target
  // (`removed` = cleaned up, otherwise left alone; the text says why and what to do).
  std::function<void(bool removed, const std::string& text)> onLeftover;
  // Every rank, once the temporary directory's name is known, before the root creates it (for
  // signal handlers that remove it). `ownerPid`: the root's pid when it runs on this host (its
  // threads may create files in the directory until it dies), else 0.
  std::function<void(const std::filesystem::path&, int ownerPid)> onTempDir;
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
  std::vector<PhaseTime> phases;                  // rank 0's
  AttributionStats attribution;                   // rank 0's
  storage::SamplingQuality quality;               // sum over all profiles (rank 0)
  storage::UnwindRecovery unwindRecovery;         // sum over all profiles (rank 0)
  std::vector<storage::ModuleLoops> moduleLoops;  // every rank's modules (rank 0)
  std::string droppedByCause;                     // "loader-busy 72803 (93.1 %), ..." (rank 0; empty: none dropped)
  // What is missing from the measurement (rank 0): ranks without profiles, ranks with fewer
  // thread profiles than most, unfinished profile temporaries (also in the database's property
  // "measurement-warnings").
  std::vector<std::string> measurementWarnings;
};

// The warnings csp-prof-mpi prints about sampling quality: one line each for truncated and
// dropped samples above storage::kQualityWarningShare of all samples; empty when it is fine.
std::vector<std::string> qualityWarnings(const storage::SamplingQuality& total);

// The summary's lines about loop recovery: the modules with loops (those known by address and
// why), then those without and why (docs/postprocessing.md, "Loops").
std::vector<std::string> loopSummary(const std::vector<storage::ModuleLoops>& modules);

// The summary's line about call paths through code without unwind tables; empty if there were none.
std::string unwindSummary(const storage::UnwindRecovery& recovery);

// Throws PipelineError on every rank if any rank fails (bad input or output, a lost peer), after
// the failure discipline of mpi_comm.hpp: rank 0's message names every failing rank's reason,
// the target is untouched and the temporary directory is removed. If the ranks cannot agree
// within the grace period the job is aborted instead (after removing the temporary directory).
ProfSummary runProf(const Comm& comm, const ProfOptions& options, ProgressSink* progress = nullptr);

}  // namespace csp::reduce
