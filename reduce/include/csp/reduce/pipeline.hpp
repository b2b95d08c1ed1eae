// The csp-prof-mpi pipeline (docs/postprocessing.md), SPMD over the processes of a communicator:
//   discover   rank 0 lists the profiles through the sources of PipelineOptions::sources (one
//              ProfileSource per input format); ids follow the sorted file list
//   partition  contiguous id ranges balanced by bytes
//   structure  read + validate + attribute + union into a local CCT (TBB), tree reduction of the
//              structures, deterministic final ids broadcast to all
//   metrics    re-read, map onto the final CCT, per-thread exclusive/inclusive values, handed to
//              a consumer in profile-id order, batch by batch (memory bounded by the batch)
// The stages are in reduce/src/pipeline/ (stages.hpp); what consumes the values -- the CSP
// database writer of prof.hpp -- is the output side.
// A stage that fails on one rank throws there (PipelineError for bad input); the caller turns it
// into the job-wide failure of mpi_comm.hpp (Comm::fail), which stops every rank at its next
// collective. runProf (prof.hpp) does that.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>

#include <tbb/task_arena.h>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/reduce/attribution.hpp"
#include "csp/reduce/canonical_cct.hpp"
#include "csp/reduce/mpi_comm.hpp"
#include "csp/reduce/profile_source.hpp"
#include "csp/reduce/projection.hpp"
#include "csp/reduce/thread_classes.hpp"
#include "csp/storage/profile.hpp"

namespace csp::reduce {

class PipelineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The input an automatic batch holds at most (csp-prof-mpi --batch-budget).
inline constexpr std::uint64_t kDefaultBatchBudget = std::uint64_t{64} << 20;

struct PipelineOptions {
  // The input formats, in the order in which they list a directory's profiles (main builds the
  // list: cspProfileSource() for csp-prof-mpi). A source's index identifies it between ranks.
  ProfileSources sources;
  std::vector<std::filesystem::path> inputs;  // measurement directories or profile files
  // TBB workers per process; 0 = all available cores. At most the CPUs the process may run on
  // (its affinity: mpirun's or srun's binding): Pipeline::workerThreads().
  unsigned jobs = 0;
  bool skipInvalid = false;  // skip unreadable profiles (recorded) instead of failing
  bool physical = false;     // OpenMP: native call paths, not logical ones (--physical)
  // Neighbouring ranks on one host balance the read by claiming batches between their shares
  // (docs/postprocessing.md, "Balancing"); false: each rank reads exactly its share (--no-balance).
  bool balanceRead = true;
  AttributionOptions attribution;
  // Profiles per metrics batch; 0: automatic (at most 256, fewer for large profiles:
  // stages::batchProfilesFor).
  std::uint32_t batchProfiles = 0;
  std::uint64_t batchBudget = kDefaultBatchBudget;  // automatic batches: bytes of input each holds at most
  // Per-thread derived metrics, `name = expression` over raw metric names (docs/metrics.md).
  std::vector<std::string> derive;
  ThreadClassOptions threadClasses;
  // Rules that classify samples of `work` as parallel overhead (overhead.hpp): empty means the
  // defaults; {"none"} means no rule.
  std::vector<std::string> overheadRules;
};

// Progress of the stages; called on rank 0 only.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void begin(const std::string& phase, std::uint64_t total) = 0;
  virtual void update(std::uint64_t done) = 0;
  virtual void end() = 0;
};

struct InputProfile {
  std::string path;
  std::uint64_t bytes = 0;
  const ProfileSource* source = nullptr;  // the format that reads it
};

// Inputs in id order, as each rank keeps its share of them through the run: each directory
// once, the file names one after the other, and a fixed-size entry per input (about 70 bytes an
// input instead of 160 as InputProfiles at 65,536 profiles).
class InputList {
 public:
  void add(const InputProfile& input);
  InputProfile operator[](std::size_t i) const;  // rebuilt: the path exactly as added
  std::uint64_t bytes(std::size_t i) const { return entries_[i].bytes; }
  std::size_t size() const { return entries_.size(); }
  void shrinkToFit();  // after the last add

 private:
  struct Entry {
    std::uint64_t bytes = 0;
    std::uint64_t nameEnd = 0;  // in names_; the name starts where the previous entry's ends
    const ProfileSource* source = nullptr;
    std::uint32_t directory = 0;  // directories_[directory]: the path up to its last '/', included
  };
  std::vector<std::string> directories_;
  std::map<std::string, std::uint32_t, std::less<>> directoryIndex_;  // until shrinkToFit
  std::string names_;
  std::vector<Entry> entries_;
};

// Reads an input as every stage does: through its source, then validated
// (storage::validateProfile) and checked against what the source declares it provides. Throws
// storage::ProfileError naming the input.
ThreadProfile readInput(const InputProfile& input);

struct SkippedInput {
  std::string path;
  std::string reason;
};

// A profile's identity as csp-prof-mpi keeps it until the metadata is written: the thread's own
// id tuple, host and pid, and the parts the threads and processes of a run share (executable,
// command line, the settings the metadata names) as an index into Pipeline::commonIdentities().
// One is kept for every profile of the run, and an Identity of its own costs about 600 bytes
// more, most of them copies of the same executable, command and settings.
struct ProfileIdentity {
  IdTuple idTuple;
  std::string hostname;
  std::uint32_t pid = 0;
  std::uint32_t common = 0;  // commonIdentities()[common]: executable, commandLine, settings
};

// An id tuple in varints (storage::ByteWriter / ByteReader, Packer / Unpacker): its length, then
// kind and value of each element. The reader refuses a length the bytes cannot hold.
template <typename Writer>
void putIdTuple(Writer& out, const IdTuple& tuple) {
  out.u64(tuple.size());
  for (const auto& e : tuple) {
    out.u64(static_cast<std::uint64_t>(e.kind));
    out.u64(e.value);
  }
}
template <typename Reader>
IdTuple getIdTuple(Reader& in) {
  const auto length = in.u64();
  if (length > in.remaining() / 2) in.fail("a longer id tuple than bytes");
  IdTuple tuple(length);
  for (auto& e : tuple) {
    e.kind = static_cast<IdKind>(in.u64());
    e.value = in.u64();
  }
  return tuple;
}

// What the database's metadata records of one profile: its identity and how well it was sampled.
struct ProfileRecord {
  ProfileIdentity identity;
  MeasurementStats stats;
  std::uint64_t truncatedSamples = 0;  // samples on incomplete call paths (projectProfile)
  std::uint64_t scannedSamples = 0;    // samples whose path went through stack scans (projectProfile)
  std::uint64_t recoveredSamples = 0;  // of them, those the unwind recipes completed
};

// One profile as the values pass and the database see it: dense id among the valid profiles and
// its input (Pipeline::forEachLocalProfile gives its record and input with it).
struct ProfileInfo {
  std::uint32_t id = 0;
  bool hasRegionEvents = false;  // the profile carries a region event log
  std::size_t input = 0;         // its index among all ranks' inputs, in input order
};

// The reduced region tree (docs/views.md, "Regions"): node 0 is the root; a region is identified by its
// parent and (name, dynamic id). Ids are deterministic: children ordered by (name, dynamic id),
// numbered in preorder.
struct RegionTreeNode {
  std::uint32_t parent = kNoIndex;
  std::string name;
  std::uint64_t dynamicId = 0;
};

// One profile's region values at final region ids, ascending, root excluded.
struct RegionValues {
  std::vector<std::uint32_t> region;
  std::vector<std::uint64_t> count;
  std::vector<std::uint64_t> inclusiveNs;
  std::vector<std::uint64_t> exclusiveNs;
};

struct PhaseTime {
  std::string phase;
  double seconds = 0;
};

class Pipeline {
 public:
  Pipeline(const Comm& comm, PipelineOptions options, ProgressSink* progress = nullptr);
  ~Pipeline();

  // Stages, to be called in order on every rank.
  void discover();
  void buildStructure();
  // Calls `consume(profiles, values)` batch by batch for this rank's profiles in increasing id
  // order, from the calling thread; values[i] belongs to profiles[i] and uses final CCT ids and
  // global metric ids.
  // `batchIndex` is the global batch number (input index / batchProfiles), the same for any
  // process count. Derived metrics' values are doubles stored as their bit patterns.
  using BatchConsumer = std::function<void(std::size_t batchIndex, std::span<const ProfileInfo>,
                                           std::vector<ThreadValues>&, std::vector<RegionValues>&)>;
  void computeMetrics(const BatchConsumer& consume);
  // Before computeMetrics: also encode each profile's values for the values by profile while
  // they are collected (ThreadValues::byProfile), in these units per metric
  // (storage::ShardOptions::valueScales). Skipped where the collected values are not the ones
  // stored (derived metrics) or the metrics are too many for the encoder.
  void encodeValuesByProfile(std::vector<std::uint64_t> scales);
  tbb::task_arena& arena();

  // Results, valid after the stage that produces them.
  // After discover: the count of all inputs. No rank keeps the whole list, and a rank keeps its
  // share only until buildStructure is done (forEachLocalProfile gives each profile's input).
  std::size_t inputCount() const;
  std::size_t batchProfiles() const;  // profiles per metrics batch (PipelineOptions::batchProfiles, or as chosen)
  // The input formats (PipelineOptions::sources): an input's source by its index and back, to
  // name an input to another rank.
  const ProfileSource* source(std::size_t index) const;
  std::size_t sourceIndex(const ProfileSource* source) const;
  const FinalCct& cct() const;                         // after buildStructure
  const std::vector<RegionTreeNode>& regions() const;  // after buildStructure
  // Final region id of every node of a profile's region tree (0 for its root).
  std::vector<std::uint32_t> regionIds(const RegionProfile& regions) const;
  StringTable& strings();
  // Global metric list, after buildStructure: measured metrics, the post-processing ones
  // (overhead, effort), then the derived ones (real-valued).
  const std::vector<MetricDescriptor>& metrics() const;
  std::uint32_t profileCount() const;    // valid profiles over all ranks
  std::uint32_t firstProfileId() const;  // this rank's first id
  // Thread class (storage::ThreadClass) of every profile, all ranks, after buildStructure.
  const std::vector<std::uint8_t>& threadClassOf() const;
  // Class, entry and reason of every profile: on rank 0 only (for the metadata).
  std::vector<storage::ThreadClassInfo> threadClasses() const;
  // This rank's valid profiles, after buildStructure: how many, and each with its record and
  // input, in id order. They are kept in a temporary file, not in memory (memory flat in the
  // number of profiles), and read back a batch at a time for each call.
  std::uint32_t localProfileCount() const;
  using LocalProfileVisitor = std::function<void(const ProfileInfo&, const ProfileRecord&, const InputProfile&)>;
  void forEachLocalProfile(const LocalProfileVisitor& visit) const;
  // The executables, command lines and settings of this rank's profiles, each once
  // (ProfileIdentity::common; only executable, commandLine and settings are set).
  const std::vector<Identity>& commonIdentities() const;
  const std::vector<SkippedInput>& skipped() const;  // all skipped inputs (all ranks)
  // Profile temporaries found in the input directories (rank 0, after discover): each is a
  // profile that a measurement killed while writing it did not finish.
  const std::vector<std::string>& leftoverTemporaries() const;
  AttributionStats attributionStats() const;
  const std::vector<PhaseTime>& phaseTimes() const;
  // This rank's worker threads (PipelineOptions::jobs, at most the CPUs it may run on).
  unsigned workerThreads() const;
  bool physicalPaths() const;  // PipelineOptions::physical

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace csp::reduce
