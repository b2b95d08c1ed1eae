// csp-prof-mpi as a library call: the pipeline (pipeline.hpp) and its outputs. Collective over
// the communicator.
//
// Outputs are sinks, in the manner of hpcprof's: the pipeline computes, each sink of
// ProfOptions::sinks writes one output format from the results. csp-prof-mpi's main() builds the
// list (cspDatabaseSink() for the CSP database); a new output format is one OutputSink added
// there (docs/layout.md, "Extending").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "csp/reduce/pipeline.hpp"
#include "csp/storage/database.hpp"

namespace csp::reduce {

struct ProfSummary {
  std::uint64_t inputs = 0;
  std::uint32_t profiles = 0;
  std::size_t batchProfiles = 0;  // profiles per metrics batch
  std::vector<SkippedInput> skipped;
  std::uint32_t cctNodes = 0;
  std::size_t metrics = 0;
  std::uint32_t regions = 0;
  std::vector<PhaseTime> phases;  // rank 0's: the pipeline's, then the sinks'
  // Per phase of `phases` up to publication (the first slowest.size() of them), the rank that
  // took longest in it and its time (rank 0; empty with one process). The job waits for its
  // slowest rank: a spread between ranks shows here.
  struct SlowestRank {
    int rank = 0;
    double seconds = 0;
  };
  std::vector<SlowestRank> slowest;
  // The fewest and the most profiles a rank post-processed (rank 0; zeros with one process): the
  // read's balancing moves whole batches between neighbouring ranks on one host.
  std::pair<std::uint32_t, std::uint32_t> profilesPerRank{0, 0};
  AttributionStats attribution;  // rank 0's
  unsigned workerThreads = 0;    // rank 0's (Pipeline::workerThreads: -j, at most its CPUs)
  // From the CSP database sink:
  std::uint64_t valuesWritten = 0;  // distinct non-zero per-thread values (each is stored in both orders)
  std::uint64_t databaseBytes = 0;
  storage::SamplingQuality quality;               // sum over all profiles (rank 0)
  storage::UnwindRecovery unwindRecovery;         // sum over all profiles (rank 0)
  std::vector<storage::ModuleLoops> moduleLoops;  // every rank's modules (rank 0)
  std::string droppedByCause;                     // "loader-busy 72803 (93.1 %), ..." (rank 0; empty: none dropped)
  // What is missing from the measurement (rank 0): ranks without profiles, ranks with fewer
  // thread profiles than most, unfinished profile temporaries (also in the database's property
  // "measurement-warnings").
  std::vector<std::string> measurementWarnings;
};

// One output format. runProf calls every step on every rank, in this order, the collective ones
// (taking `comm`) on all ranks alike. A step that throws (on any rank) ends the run through the
// failure discipline of mpi_comm.hpp: stop() on each rank before the ranks agree on the failure,
// abandon() once they have.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Before the pipeline's heavy work: claim the output, failing fast on a bad target.
  virtual void open(const Comm& comm) = 0;
  // The structure is known (pipeline.cct(), metrics(), regions(), localProfileCount()).
  virtual void begin(const Comm& comm, Pipeline& pipeline) = 0;
  // One batch of this rank's per-thread values (Pipeline::BatchConsumer): called from one thread
  // at a time, in batch order, while the pipeline computes the next batch; may run tasks in
  // pipeline.arena().
  virtual void write(std::size_t batchIndex, std::span<const ProfileInfo> batch,
                     const std::vector<ThreadValues>& values, const std::vector<RegionValues>& regionValues) = 0;
  // After the last batch: combine across ranks and complete the output (not yet visible).
  virtual void finish(const Comm& comm, Pipeline& pipeline, ProfSummary& summary) = 0;
  // Make the output visible, atomically.
  virtual void publish(const Comm& comm, ProfSummary& summary) = 0;
  // This rank failed, or a peer did: stop writing (drop this rank's partial files).
  virtual void stop() noexcept {}
  // After a failure, once every rank has stopped: remove what open() and later began.
  virtual void abandon() noexcept {}
};

// The CSP database (docs/database-format.md), written in parallel and published atomically.
struct DatabaseSinkOptions {
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
std::shared_ptr<OutputSink> cspDatabaseSink(DatabaseSinkOptions options);

struct ProfOptions {
  PipelineOptions pipeline;
  // The outputs (main builds the list). A sink is used for one run.
  std::vector<std::shared_ptr<OutputSink>> sinks;
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
// every sink's output is untouched and its temporary files are removed. If the ranks cannot
// agree within the grace period the job is aborted instead (after the abort hooks, which remove
// the temporary files).
ProfSummary runProf(const Comm& comm, const ProfOptions& options, ProgressSink* progress = nullptr);

}  // namespace csp::reduce
