// The stages of the pipeline (pipeline.hpp), each a function or class with typed inputs and
// outputs; pipeline.cpp runs them in order and keeps their results:
//
//   discover      Discovery           the inputs (rank 0 lists them through the sources), this
//                                      rank's share                                 discover.cpp
//   read          ReadResult          read + validate + attribute + union into the local CCT and
//                                      region union, per profile what later stages need  read.cpp
//                                      (its projected values go to the ProjectionSpill) spill.cpp
//   profiles      ProfileTable        skipped inputs everywhere, dense profile ids, distinct
//                                      identities                                  profiles.cpp
//   threads       ThreadClassification thread features -> classes (thread_classes.hpp) threads.cpp
//   metrics       MetricPlan          the global metric list: measured, state and derived
//                                                                               metric_plan.cpp
//   cct           FinalCct            tree reduction of the local CCTs                 cct.cpp
//   regions       RegionTree          the union of the region trees, final ids    regions.cpp
//   values        ProfileValues       per profile: its values on the final CCT and its region
//                                      values, batch by batch                       values.cpp
//
// Stages that communicate do so only through the collectives of mpi_comm.hpp. Everything a stage
// shares with the threads of its parallel loops is marked `// MT:`.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "csp/metrics/expression.hpp"
#include "csp/reduce/overhead.hpp"
#include "csp/reduce/pipeline.hpp"
#include "csp/storage/bytes.hpp"

namespace csp::reduce::stages {

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The worker threads of one rank, the progress of its phases (rank 0) and their times.
class Workers {
 public:
  // `jobs` (0: the CPUs this process may run on) at most those CPUs: more threads than a rank is
  // bound to would share its cores, and oneTBB would refuse their workers with a warning of its
  // own on every rank.
  Workers(unsigned jobs, ProgressSink* progress)
      : threads_(workerThreadsFor(jobs)), arena_(static_cast<int>(threads_)), progress_(progress) {}
  unsigned threads() const { return threads_; }  // the arena's threads, the calling one included
  tbb::task_arena& arena() { return arena_; }
  ProgressSink* progress() const { return progress_; }

  void begin(const std::string& phase, std::uint64_t total) {
    if (progress_) progress_->begin(phase, total);
  }
  void end(const std::string& phase, const Stopwatch& watch) {
    if (progress_) progress_->end();
    record(phase, watch.seconds());
  }
  void record(const std::string& phase, double seconds) { phases_.push_back({phase, seconds}); }
  const std::vector<PhaseTime>& phases() const { return phases_; }

  // body(i) for i in [0, count) on the workers, with progress from this rank's own share.
  template <typename F>
  void forEach(std::size_t count, F&& body) {
    std::atomic<std::uint64_t> done{0};
    forEach(count, std::forward<F>(body), done, count);
  }
  // The same as one part of a phase: `done` counts the phase's items so far, shown against
  // `total` (at most: a rank may do more than its share).
  template <typename F>
  void forEach(std::size_t count, F&& body, std::atomic<std::uint64_t>& done, std::uint64_t total) {
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          body(i);
          const auto d = ++done;
          // Updates come from workers; the sink only redraws when the percentage moves.
          if (progress_ && std::this_thread::get_id() == main_) progress_->update(std::min<std::uint64_t>(d, total));
        }
      });
    });
    if (progress_) progress_->update(std::min<std::uint64_t>(done, total));
  }

 private:
  static unsigned workerThreadsFor(unsigned jobs) {
    const auto cpus = static_cast<unsigned>(std::max(tbb::info::default_concurrency(), 1));
    return jobs == 0 ? cpus : std::min(jobs, cpus);
  }
  unsigned threads_;
  tbb::task_arena arena_;
  ProgressSink* progress_;  // rank 0 only
  std::thread::id main_ = std::this_thread::get_id();
  std::vector<PhaseTime> phases_;
};

// A stage's local errors end it on this rank: thrown as one PipelineError (the first few
// messages), which runProf turns into the job-wide failure (mpi_comm.hpp).
void throwIfAny(const std::vector<std::string>& errors);

// --- discover (discover.cpp) -------------------------------------------------------------------

struct Discovery {
  InputList inputs;  // inputs[i] is input begin + i; released once the
                     // structure is built
  // This rank's inputs, of all ranks' in id order: until the read, every input it may read (the
  // batches [lowerMiddle, upperMiddle)); from then on, the ones it read (readAndAttribute).
  std::size_t begin = 0, end = 0;
  std::size_t total = 0;                         // the inputs of all ranks
  std::size_t batchProfiles = 1;                 // profiles per batch (batchProfilesFor), all ranks alike
  std::vector<std::string> leftoverTemporaries;  // rank 0: unfinished profiles in the directories
  // The read's balancing (read.cpp), in batches of all ranks' inputs: this rank's static share
  // is [shareLow, shareHigh) and `middle` splits it. [lowerMiddle, middle) is the interval it may
  // share with rank - 1 (from rank - 1's middle), [middle, upperMiddle) the one with rank + 1.
  // Without balancing, lowerMiddle = shareLow and upperMiddle = shareHigh.
  std::size_t shareLow = 0, shareHigh = 0, lowerMiddle = 0, middle = 0, upperMiddle = 0;
  // Input `index` (of all ranks' inputs), which must be in this rank's share.
  InputProfile input(std::size_t index) const { return inputs[index - begin]; }
  // The first input of batch `b` (`total` for the batches past the last).
  std::size_t firstInputOf(std::size_t b) const { return std::min(b * batchProfiles, total); }
};

// The values pass's batch size for these inputs (all of the run's, in id order): `requested`
// when it is not 0 (--batch N); else as many profiles as hold about `budget` bytes of input
// together (by their mean size; --batch-budget, default kDefaultBatchBudget), at least 1 and at
// most kMaxBatchProfiles. Per-thread values take one to three times the memory of their input,
// and two batches are in flight at a time: profiles of large CCTs get smaller batches, so a
// process's memory stays bounded whatever their size. Small
// profiles get large batches: the values by node cost per key, i.e. per node, metric, scope and
// batch (at 4,096 profiles of the benchmark, 256 instead of 128 takes 5 % less CPU time for 50
// MiB more memory; 512, no less than 256). A function of the inputs only, so every process
// count gets the same batches.
inline constexpr std::size_t kMaxBatchProfiles = 256;
std::size_t batchProfilesFor(const InputList& inputs, std::size_t requested,
                             std::uint64_t budget = kDefaultBatchBudget);

// Where `source` is in `sources` (an input's source named to another rank).
std::size_t sourceIndex(const ProfileSources& sources, const ProfileSource* source);

// An input in varints: its path, size and source (as its index in `sources`). The reader
// refuses an index with no source.
template <typename Writer>
void putInput(Writer& out, const InputProfile& input, const ProfileSources& sources) {
  out.text(input.path);
  out.u64(input.bytes);
  out.u64(sourceIndex(sources, input.source));
}
template <typename Reader>
InputProfile getInput(Reader& in, const ProfileSources& sources) {
  InputProfile input;
  input.path = in.text();
  input.bytes = in.u64();
  const auto source = in.u64();
  if (source >= sources.size()) in.fail("no such input format");
  input.source = sources[source].get();
  return input;
}

// Rank 0 lists the inputs through the sources and sends each rank only its contiguous share
// (whole batches, balanced by bytes): no rank keeps the whole list.
Discovery discover(const Comm& comm, const PipelineOptions& options);

// --- read (read.cpp) ---------------------------------------------------------------------------

// Region trees are small (tens to thousands of nodes): a map under a mutex is enough.
class RegionUnion {
 public:
  RegionUnion() { nodes_.push_back({kNoIndex, "", 0}); }
  // Adds a profile's region tree (MT: any thread).
  void add(const RegionProfile& regions);
  void merge(const std::vector<RegionTreeNode>& other);
  const std::vector<RegionTreeNode>& nodes() const { return nodes_; }
  // Deterministic numbering: children ordered by (name, dynamic id), in preorder.
  std::vector<RegionTreeNode> finalTree() const;

 private:
  std::uint32_t child(std::uint32_t parent, const std::string& name, std::uint64_t dynamicId);
  std::mutex mutex_;
  std::vector<RegionTreeNode> nodes_;                                                     // MT: under mutex_
  std::map<std::tuple<std::uint32_t, std::string, std::uint64_t>, std::uint32_t> index_;  // MT: under mutex_
};

// Where a profile's projected values lie in the ProjectionSpill; `reread`: not there, the values
// pass reads the profile again (it has regions, whose ids the spill does not keep).
struct SpillRef {
  std::uint64_t offset = 0;
  std::size_t size = 0;
  bool reread = true;
};

// An unlinked temporary file (in CSP_SPILL_DIR, else $TMPDIR) that keeps records csp-prof-mpi
// needs again later, so that its memory stays flat in the number of profiles: gone with the
// process, whatever way it ends. `what` names it in messages ("projection spill").
class SpillFile {
 public:
  explicit SpillFile(std::string what);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  // MT: any thread. Throws std::runtime_error (disk full: naming the directory).
  SpillRef write(const char* data, std::size_t size);
  // The record's bytes into `out` (resized to fit, at least). MT: any thread.
  void read(const SpillRef& ref, std::vector<char>& out) const;

 private:
  std::string what_;
  int fd_ = -1;
  std::string dir_;                     // where the (unlinked) file lives, for messages
  std::atomic<std::uint64_t> next_{0};  // MT: where the next record goes
};

// Reading, validating and projecting a profile is most of the structure pass; the values pass
// needs only its values at their canonical statements and its metric names. They are kept from
// the structure pass, at local CCT ids (finalIdsOf maps them), in a SpillFile (varints, a sixth
// of the input's size for CSP's profiles).
class ProjectionSpill {
 public:
  ProjectionSpill() : file_("projection spill") {}

  struct Projected {
    std::vector<std::string> metrics;  // the profile's metric names; StmtValue::metric indexes them
    std::vector<StmtValue> stmt;       // at local CCT ids, in projectProfile's order
  };
  // MT: any thread.
  SpillRef put(const std::vector<MetricDescriptor>& metrics, const std::vector<StmtValue>& stmt);
  Projected get(const SpillRef& ref) const;

 private:
  SpillFile file_;
};

// The final id of every node of a local CCT (which holds at least this rank's contexts).
std::vector<std::uint32_t> finalIdsOf(const LocalCct& local, const FinalCct& cct);

// What the structure pass keeps of one profile until the database is written.
struct ReadProfile {
  ProfileInfo info;  // id still 0
  ProfileRecord record;
  std::uint32_t metrics = 0;  // ReadResult::metricLists[metrics]: its metrics, until the list is unified
  SpillRef spill;
  ThreadFeatures features;  // what the thread classification looks at
};

// A profile's thread features in varints (storage::ByteWriter / ByteReader and their kin): in the
// profile spool, and on their way to rank 0 for the classification.
template <typename Writer>
void putFeatures(Writer& out, const ThreadFeatures& f) {
  out.text(f.process);
  out.u64(f.initialThread ? 1 : 0);
  out.u64(f.work);
  out.u64(f.waited);
  out.text(f.entry);
  out.text(f.entryModule);
}
template <typename Reader>
ThreadFeatures getFeatures(Reader& in) {
  ThreadFeatures f;
  f.process = in.text();
  f.initialThread = in.u64() != 0;
  f.work = in.u64();
  f.waited = in.u64();
  f.entry = in.text();
  f.entryModule = in.text();
  return f;
}

// A ReadProfile as the structure pass keeps it, in the profile spool (SpillFile), until the
// profiles are numbered: in memory, 16 bytes per input instead of about 300.
std::string encodeReadProfile(const ReadProfile& profile);
ReadProfile decodeReadProfile(std::string_view bytes);  // throws std::runtime_error if malformed

struct KeptProfile {
  std::uint64_t offset = 0;   // of its encodeReadProfile bytes in the profile spool
  std::uint32_t size = 0;     // 0: the input was skipped
  std::uint32_t metrics = 0;  // ReadProfile::metrics
  bool valid() const { return size != 0; }
  SpillRef where() const { return {offset, size, false}; }
};

// The parts of identities that the threads and processes of a run share (executable, command
// line, the settings the metadata names), each kept once: ProfileIdentity::common indexes them.
// Which index an entry gets depends on the order in which the workers add; only the entries
// are used, never the order. MT: add() from any thread.
class CommonIdentities {
 public:
  // Moves `identity`'s executable, command line and settings into the table; returns the index
  // of the entry equal to them.
  std::uint32_t add(Identity& identity);
  std::vector<Identity> take();  // after the last add()

 private:
  std::mutex mutex_;
  std::map<std::string, std::uint32_t> index_;  // MT: under mutex_; the three fields packed
  std::vector<Identity> entries_;               // MT: under mutex_
};

// The metric lists of a rank's profiles, each distinct list kept once (the threads of a run
// mostly share one): ReadProfile::metrics indexes them. MT: add() from any thread.
class MetricLists {
 public:
  std::uint32_t add(std::vector<MetricDescriptor>&& metrics);
  std::vector<std::vector<MetricDescriptor>> take();  // after the last add()

 private:
  std::mutex mutex_;
  std::vector<std::vector<MetricDescriptor>> lists_;
};

struct ReadResult {
  std::vector<KeptProfile> profiles;                       // per input of this rank, in the profile spool
  std::vector<SkippedInput> skipped;                       // this rank's, sorted by path
  std::vector<Identity> common;                            // ProfileIdentity::common
  std::vector<std::vector<MetricDescriptor>> metricLists;  // ReadProfile::metrics; released once unified
};

// Everything of one rank that the read and values passes share with their worker threads.
struct Attribution {
  StringTable& strings;              // MT: thread-safe interning
  Attributor& attributor;            // MT: thread-safe
  bool physical = false;             // OpenMP: native paths instead of logical ones (--physical)
  ProjectionSpill* spill = nullptr;  // MT: thread-safe; the structure pass's projections
};

// Reads this rank's inputs in parallel, attributes them and unions their contexts into
// `localCct` and their region trees into `regions`; what is kept of each profile goes to `kept`.
// Balanced between neighbouring ranks on one host through `words` (Comm::shareWithNeighbours;
// no shared word: each rank reads its static share): afterwards `discovery` holds the inputs
// this rank read, a contiguous range of whole batches.
ReadResult readAndAttribute(Discovery& discovery, const PipelineOptions& options, Workers& workers,
                            Attribution attribution, LocalCct& localCct, RegionUnion& regions, SpillFile& kept,
                            const Comm::NeighbourWords& words);

// The batches a rank reads, claimed one at a time (docs/postprocessing.md, "Balancing"). The
// interval between the middles of two neighbours' static shares is a queue of batches with two
// ends: the lower rank takes from its bottom, the upper rank from its top, both counted in one
// word they share (the low half: taken from the bottom; the high half: from the top), so each
// rank's batches stay one contiguous range. Up to the boundary of the static shares a rank
// takes its own batches; beyond it, one of its neighbour's only while it would still finish
// before the neighbour, judged from the progress both publish (their seconds per batch so far,
// the batches they have claimed, what is left in the queue): a whole batch moves the metrics
// work that follows it too, so two ranks of the same speed keep their shares. A side whose
// neighbour runs on another host (or that has none) is the rank's own part of its static share.
// The own parts come first, then the shared sides by turns, from the middle outwards.
// MT: next() and finished() from one thread.
class BatchClaims {
 public:
  // A rank's words (Comm::shareWithNeighbours): its queue with rank + 1, then what it publishes
  // of its read: when it began (Clock; 0: not yet), the batches it has read and has claimed, and
  // when it finished the last batch it read (its start until then).
  enum Word : std::size_t { kQueue = 0, kStart = 1, kDone = 2, kClaimed = 3, kLast = 4, kWords = 5 };
  // How much longer per batch a neighbour must take before its batches are taken over. The
  // cores of a virtual machine change speed by 10-20 % for seconds at a time, so a smaller
  // difference in the read need not hold in the metrics phase that follows (at 65,536 profiles,
  // -np 2, without this threshold: 14 batches moved to the faster reader, and the slowest
  // rank's metrics then took 29.6 s against 23-25 s with the static shares); a core shared with
  // another program takes about twice as long.
  static constexpr double kSlowerBy = 1.25;
  struct Side {
    std::uint64_t* queue = nullptr;      // the word shared with the neighbour; null: this rank's alone
    std::uint64_t* neighbour = nullptr;  // the neighbour's words (with `queue`; only read)
    std::size_t begin = 0, end = 0;      // the interval's batches
    std::size_t boundary = 0;            // where the static shares meet in it (with `queue`)
  };
  using Clock = std::function<std::uint64_t()>;  // nanoseconds, one clock for the ranks of a host
  static std::uint64_t steadyNanoseconds();
  // `lower`: the side below the middle (taken from its top when it is shared), `upper` the side
  // above (taken from its bottom). `mine`: this rank's words (null: kept here). Reading begins.
  BatchClaims(Side lower, Side upper, std::uint64_t* mine = nullptr, Clock now = steadyNanoseconds);
  BatchClaims(const BatchClaims&) = delete;
  BatchClaims& operator=(const BatchClaims&) = delete;
  // The next batch; none when both sides are spent (or their rest is better left to the
  // neighbours).
  std::optional<std::size_t> next();
  // The batch next() gave last is read.
  void finished();
  // Once next() has returned none: the batches this rank took, [first, last).
  std::size_t first() const;
  std::size_t last() const;

 private:
  struct Queue {
    std::uint64_t* word;
    std::uint64_t* neighbour;
    std::size_t begin, end, boundary;
    bool fromTop, shared;
    bool closed = false;  // its rest is left to the neighbour
  };
  std::optional<std::size_t> take(Queue& q);
  bool worthTaking(const Queue& q, std::uint64_t unclaimed) const;
  static std::uint64_t taken(const Queue& q, bool top);
  std::uint64_t own_[kWords + 2] = {};  // this rank's words when not shared, and its own queues
  std::uint64_t* mine_;
  Clock now_;
  Queue queues_[2];  // lower, upper
  std::size_t turn_ = 0;
};

// The JIT symbols of a profile's process, if its source keeps them.
const PerfMap* jitSymbolsOf(Attributor& attributor, const InputProfile& input, const ThreadProfile& profile);

// --- profiles (profiles.cpp) -------------------------------------------------------------------

// This rank's valid profiles in id order, with what the values pass and the metadata need of
// each: its info, where its projected values lie, its input and its record. They are kept in a
// SpillFile one batch of the values pass at a time and read back a batch at a time, so that
// memory stays flat in the number of profiles (in memory: a few words per batch).
class LocalProfiles {
 public:
  struct Batch {
    std::size_t index = 0;  // the values pass's batch: input index / batchProfiles
    std::uint32_t count = 0;
    SpillRef where;
  };
  struct Loaded {  // one batch, as added
    std::vector<ProfileInfo> infos;
    std::vector<SpillRef> spill;
    std::vector<InputProfile> inputs;
    std::vector<ProfileRecord> records;
  };
  LocalProfiles() = default;
  // `sources`: an input's source is kept as its index among them.
  LocalProfiles(SpillFile& file, const ProfileSources& sources) : file_(&file), sources_(&sources) {}
  // Profiles in id order, `batch` ascending.
  void add(std::size_t batch, const ProfileInfo& info, const SpillRef& spill, const InputProfile& input,
           const ProfileRecord& record);
  void finish();  // after the last add
  std::uint32_t size() const { return count_; }
  const std::vector<Batch>& batches() const { return batches_; }
  Loaded load(const Batch& batch) const;

 private:
  void flush();
  SpillFile* file_ = nullptr;
  const ProfileSources* sources_ = nullptr;
  std::vector<Batch> batches_;
  std::string pending_;  // the profiles of the batch being added, encoded
  std::uint32_t count_ = 0;
};

struct ProfileTable {
  LocalProfiles local;                // this rank's valid profiles, ascending id
  std::uint32_t firstId = 0;          // of this rank's profiles
  std::uint32_t count = 0;            // valid profiles of all ranks
  std::vector<SkippedInput> skipped;  // of all ranks, in input order
  std::vector<Identity> common;       // ProfileIdentity::common of local
  // local's thread features, packed in order for the classification, until the threads are
  // classified.
  std::vector<std::byte> features;
};

// Shares the skipped inputs, numbers the valid profiles densely in input order, keeps them in
// `kept` (LocalProfiles; read back from there: readAndAttribute's ReadProfiles) and checks that
// no thread is there twice. Moves the common identities out of `read`.
ProfileTable tabulateProfiles(const Comm& comm, const Discovery& discovery, ReadResult& read,
                              const PipelineOptions& options, SpillFile& kept);

// --- threads (threads.cpp) ---------------------------------------------------------------------

// What the classification looks at in one profile: its process, whether it is the initial
// thread, its work (samples of the source's work metric) and its entry procedure.
ThreadFeatures threadFeatures(const ThreadProfile& profile, const std::string& workMetric,
                              const std::vector<StmtValue>& stmt, const EntryTracker& entries, const LocalCct& cct,
                              const StringTable& strings);

struct ThreadClassification {
  std::vector<std::uint8_t> classOf;  // storage::ThreadClass of every profile, all ranks
  // Rank 0: the entry and reason of every profile, packed one after the other, kept in a
  // SpillFile until the metadata is written (in memory they would take 35 bytes a profile).
  const SpillFile* kept = nullptr;
  SpillRef entriesAndReasons;
  std::vector<storage::ThreadClassInfo> infos() const;  // class, entry and reason per profile
};

// The features of every profile go to rank 0, which classifies them with the whole process in
// view (a process's threads may lie on several ranks). Releases table.features.
ThreadClassification classifyThreads(const Comm& comm, ProfileTable& table, const ThreadClassOptions& options,
                                     SpillFile& kept);

// --- metrics (metric_plan.cpp) -----------------------------------------------------------------

struct DerivedMetric {
  metrics::PerThreadDerivedMetric metric;
  std::vector<std::uint16_t> inputs;  // metric ids of its inputs (measured or state metrics)
};

inline constexpr std::uint16_t kNoMetric = 0xFFFF;

// Post-processing metrics of idleness accounting (docs/postprocessing.md, "Work, idleness,
// overhead"): overhead = work in runtime code, effort = work + idleness. kNoMetric when absent.
struct StateMetrics {
  std::uint16_t work = kNoMetric, idleness = kNoMetric, overhead = kNoMetric, effort = kNoMetric;
  bool any() const { return overhead != kNoMetric || effort != kNoMetric; }
};

struct MetricPlan {
  // Measured metrics in first appearance by profile id, then the state metrics, then the derived.
  std::vector<MetricDescriptor> metrics;
  std::size_t raw = 0;  // measured and state metrics
  StateMetrics state;
  std::vector<DerivedMetric> derived;  // metric raw + i
};

// The global metric list: each rank's first-appearance list, merged at the root in rank order
// (= profile id order) and broadcast; then the state and --derive metrics.
MetricPlan planMetrics(const Comm& comm, const Discovery& discovery, ReadResult& read, const PipelineOptions& options,
                       const OverheadRules& overheadRules);

// Appends the per-thread derived metrics to one profile's values.
ThreadValues withDerived(const ThreadValues& values, const MetricPlan& plan);

// --- cct (cct.cpp) -----------------------------------------------------------------------------

// Binomial-tree reduction of the local CCT structures towards rank 0, which numbers the canonical
// CCT; the result is broadcast.
FinalCct unifyCct(const Comm& comm, LocalCct& localCct, StringTable& strings);

// --- regions (regions.cpp) ---------------------------------------------------------------------

// The reduced region tree and the one mapping from a profile's region nodes to its ids.
class RegionTree {
 public:
  // Gathers the ranks' unions at the root, which merges and numbers them; broadcast.
  static RegionTree unify(const Comm& comm, const RegionUnion& mine);
  const std::vector<RegionTreeNode>& nodes() const { return nodes_; }
  // Final id of every node of a profile's region tree (0 for its root).
  std::vector<std::uint32_t> idsOf(const RegionProfile& regions) const;
  // A profile's region values at final ids, ascending.
  RegionValues valuesOf(const RegionProfile& regions) const;

 private:
  std::vector<RegionTreeNode> nodes_;
  std::map<std::tuple<std::uint32_t, std::string, std::uint64_t>, std::uint32_t> index_;
};

// --- values (values.cpp) -----------------------------------------------------------------------

// What the values of one profile are computed from; read-only while they are (MT: shared).
struct ValueInputs {
  const FinalCct& cct;
  const std::vector<std::uint32_t>& finalIdOf;  // per local CCT node (finalIdsOf)
  const MetricPlan& plan;
  const std::vector<std::uint8_t>& overheadNode;  // per final node; empty without `overhead`
  const RegionTree& regions;
  // Per metric, the units of the values by profile (storage::ShardOptions::valueScales) to encode
  // them in as they are collected (ThreadValues::byProfile); empty: not encoded.
  const std::vector<std::uint64_t>& byProfileScales;
};

// Takes this rank's profiles from the projection spill (re-reads those with regions) batch by
// batch (profiles whose input index / batchProfiles is the same), computes their values in
// parallel and hands each batch to `consume` on a thread of its own while the next one is
// computed (at most two batches alive).
void computeValues(const ProfileTable& profiles, const PipelineOptions& options, Workers& workers,
                   Attribution attribution, const ValueInputs& inputs, const Pipeline::BatchConsumer& consume);

}  // namespace csp::reduce::stages
