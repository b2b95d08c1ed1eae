// The experiment database: one RocksDB instance per directory (docs/database-format.md).
//
// This header holds the persisted data model and the reader. Writing lives in
// database_writer.hpp. Summary and region accumulators are opaque bytes here: metrics/ owns
// their encoding, storage only keeps them in id order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "csp/storage/clock.hpp"
#include "csp/storage/profile.hpp"

namespace csp::storage {

// 1.1: region metric descriptors; 1.2: the region_events column family (region event logs);
// 1.3: the sampling quality per profile (quality/ metadata keys); 1.4: distributions, thread
// classes; 1.5: unwind recovery, module loops; 1.6: GPU id kinds, real-valued raw metrics;
// 1.7: process clocks and communication events; 1.8: where a non-blocking operation's wait starts.
// 2.0: per-thread values of count metrics stored in units of their period (sample counts), each
// value block naming its scale; a format 1 reader cannot read them, this one reads format 1.
// 3.0: a node group of a profile block whose values are exclusive ones that are also the node's
// inclusive ones (CCT leaves) lists them once, flagged in its count; a format 2 reader would
// misread such blocks, this one reads formats 1 and 2.
// 4.0: a profile block's node groups name their columns by a per-block pattern, and a node
// block lists its profiles as a bitmap where that takes at most a byte per value; a format 3
// reader would misread both, this one reads formats 1 to 3.
inline constexpr std::uint32_t kDatabaseFormatMajor = 4;
inline constexpr std::uint32_t kDatabaseFormatMinor = 0;
inline constexpr std::uint32_t kOldestReadableFormatMajor = 1;
// The plain-text file that makes a directory a CSP database.
inline constexpr const char* kDatabaseManifestName = "CSP-DATABASE";

using NodeId = std::uint32_t;     // canonical CCT node, dense, 0 = root
using ProfileId = std::uint32_t;  // dense profile (thread) id, index into DatabaseMetadata::profiles
using MetricId = std::uint16_t;   // index into DatabaseMetadata::metrics
using StringId = std::uint32_t;   // index into DatabaseMetadata::strings; 0 is ""
using RegionId = std::uint32_t;   // reduced region tree node, dense, 0 = root

enum class MetricScope : std::uint8_t { Exclusive = 0, Inclusive = 1 };

// A database that cannot be opened or read. what() reads "<directory>: <problem>".
class DatabaseError : public std::runtime_error {
 public:
  DatabaseError(std::filesystem::path directory, std::string problem);
  const std::filesystem::path& directory() const { return directory_; }
  const std::string& problem() const { return problem_; }

 private:
  std::filesystem::path directory_;
  std::string problem_;
};

// How per-thread values of a metric are to be read (csp::ValueType): integer counts (value =
// count x period), or real numbers (per-thread derived metrics, real-valued metrics of other
// formats' profiles) stored as the bit pattern of a double so that the tensor stays one integer
// type.
using ValueType = csp::ValueType;

struct StoredMetric {
  MetricDescriptor descriptor;             // its valueType is read back as `valueType`
  ValueType valueType = ValueType::Count;  // what the database stores and its readers go by
  bool operator==(const StoredMetric&) const = default;
};

// A metric of the regions (their own small table, ids 0..n-1): which scopes are stored, and
// whether there is one value per thread or one per process (from the region event logs).
struct RegionMetricInfo {
  std::string name;
  std::string unit;
  std::string description;
  bool exclusive = true;
  bool inclusive = false;
  bool perProcess = false;
  bool operator==(const RegionMetricInfo&) const = default;
};

// The region metrics csp-prof-mpi writes, ids = positions (docs/database-format.md): from each
// thread's region tree visits (E) and time (ns, E and I); from the region event logs, one value
// per process, the concurrency metrics (E). Format 1.1 and later describe them in the metadata
// (`region-metric/`); databases of format 1.0 were written with exactly this table.
enum class RegionMetricId : std::uint16_t {
  Visits = 0,
  Time = 1,
  AnyTime = 2,
  AllTime = 3,
  Area = 4,
  StragglerTime = 5,
  MaxParallelism = 6
};
const std::vector<RegionMetricInfo>& standardRegionMetrics();

struct SkippedInput {
  std::string path;
  std::string reason;
  bool operator==(const SkippedInput&) const = default;
};

// How well one thread (or, summed, the experiment) was sampled (docs/postprocessing.md, "Path
// quality"). `truncatedSamples` is decided by csp-prof-mpi: samples whose call path does not
// start at a thread entry (program entry, thread start, or a frame whose unwind information
// ends the stack), including those cut at an address outside every module and those cut at
// the depth limit (`depthLimited`, counted by the measurement).
struct SamplingQuality {
  std::uint64_t samples = 0;           // samples taken (MeasurementStats::samples)
  std::uint64_t unwindFailures = 0;    // samples whose unwind stopped with an error
  std::uint64_t droppedSamples = 0;    // samples not recorded
  std::uint64_t truncatedSamples = 0;  // recorded samples whose path is not complete
  std::uint64_t depthLimited = 0;      // samples cut at the depth limit (MeasurementStats::truncatedPaths)
  SamplingQuality& operator+=(const SamplingQuality& o) {
    samples += o.samples;
    unwindFailures += o.unwindFailures;
    droppedSamples += o.droppedSamples;
    truncatedSamples += o.truncatedSamples;
    depthLimited += o.depthLimited;
    return *this;
  }
  bool operator==(const SamplingQuality&) const = default;
};

// Thread classes (docs/views.md, "Thread classes"): the thread a process started with, threads
// that share the work, and runtime helpers (progress, communication, monitoring threads) that
// are mostly idle. Statistics are also kept per class (format 1.4, the `distributions` family).
enum class ThreadClass : std::uint8_t { Main = 1, Worker = 2, Helper = 3 };
inline constexpr std::uint8_t kThreadClassCount = 3;
// The population tag of `distributions` entries: all threads, or one ThreadClass.
inline constexpr std::uint8_t kAllThreads = 0;
const char* toString(ThreadClass threadClass);
std::optional<ThreadClass> parseThreadClass(std::string_view text);

struct ThreadClassInfo {
  ThreadClass threadClass = ThreadClass::Worker;
  std::string entry;   // the thread's entry procedure (where its own code starts), if known
  std::string reason;  // why it is in this class, for --info
  bool operator==(const ThreadClassInfo&) const = default;
};

// The profiles a `--threads` selection covers: "" for the default (the main and worker threads
// when the database has helper threads, else all), "all", "work" (main and worker), or a
// comma-separated list of classes. Throws std::invalid_argument with a one-line reason.
struct ThreadSelection {
  bool all = true;                           // every profile (the summaries family)
  bool classes[kThreadClassCount + 1] = {};  // by ThreadClass value, when !all
  std::uint64_t profiles = 0;                // N: profiles in the selection
  std::uint64_t excluded = 0;                // profiles left out
  std::string label;                         // "all threads", "main, worker threads"
  bool covers(ThreadClass c) const { return all || classes[static_cast<std::size_t>(c)]; }
};
struct DatabaseMetadata;
ThreadSelection selectThreads(const DatabaseMetadata& metadata, const std::string& spec);

// csp-prof-mpi warns (and csp-views --info marks) when more than this share of the samples is
// truncated or dropped.
inline constexpr double kQualityWarningShare = 0.10;

// The property csp-prof-mpi sets when an OpenMP runtime of the measurement found no OpenMP tool
// under csp-run --idleness ("not measured: <runtimes> ..."): OpenMP idleness is missing, and
// csp-views --effort draws no conclusions.
inline constexpr std::string_view kOpenmpIdlenessProperty = "openmp-idleness";

// How csp-prof-mpi placed the samples of OpenMP parallel regions and tasks (docs/postprocessing.md,
// "Logical call paths"): "logical", "physical (csp-prof-mpi --physical)", "physical (csp-run
// --no-logical)", or "physical: <runtimes> ran without an OpenMP tool (OMPT)". Absent when no
// profile used an OpenMP runtime.
inline constexpr std::string_view kOpenmpCallPathsProperty = "openmp-call-paths";

// Call paths through code without unwind tables (format 1.5; docs/postprocessing.md, "Code
// without unwind information"): samples (of sampled metrics) whose path went through frames
// above which the measurement scanned the stack, and those of them whose path the unwind recipes
// of csp-prof-mpi completed (the others are truncated).
struct UnwindRecovery {
  std::uint64_t scannedSamples = 0;
  std::uint64_t recoveredSamples = 0;
  bool operator==(const UnwindRecovery&) const = default;
};

// The loops recovered in one module, or why none, or why some have no line (format 1.5;
// docs/postprocessing.md, "Loops").
struct ModuleLoops {
  std::string module;  // the module's file name
  std::uint64_t loops = 0;
  std::uint64_t byAddress = 0;  // of them, known by their header address (their code has no line)
  std::string note;             // why none, or why by address; empty when every loop has a line
  auto operator<=>(const ModuleLoops&) const = default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads it
};

struct DatabaseMetadata {
  std::string title;  // free description of the experiment
  std::string executable;
  std::vector<std::string> commandLine;
  std::vector<std::string> hostnames;
  std::uint64_t processCount = 0;
  std::uint64_t threadCount = 0;
  std::uint32_t nodeCount = 0;    // canonical CCT nodes (ids 0 .. nodeCount-1)
  std::uint32_t regionCount = 0;  // region tree nodes
  std::vector<StoredMetric> metrics;
  std::vector<RegionMetricInfo> regionMetrics;  // RegionSummary metric id -> descriptor (format 1.1)
  // The region metrics: regionMetrics, or for a format 1.0 database (which did not describe
  // them) the table it was written with.
  const std::vector<RegionMetricInfo>& describedRegionMetrics() const {
    return regionMetrics.empty() ? standardRegionMetrics() : regionMetrics;
  }
  std::vector<IdTuple> profiles;     // ProfileId -> id tuple
  std::vector<std::string> strings;  // StringId -> text; strings[0] == ""
  std::vector<SkippedInput> skipped;
  std::vector<Setting> properties;  // free key/value, keys unique; read back sorted by key
  // Sampling quality per profile (ProfileId -> quality) and its sum. Empty in databases of
  // format 1.0, which did not record it; otherwise one entry per profile.
  std::vector<SamplingQuality> quality;
  // Thread class per profile (format 1.4); empty in older databases.
  std::vector<ThreadClassInfo> threadClasses;
  std::optional<UnwindRecovery> unwindRecovery;  // format 1.5; absent in older databases
  std::vector<ModuleLoops> moduleLoops;          // format 1.5: per module that attribution needed, by name
  bool operator==(const DatabaseMetadata&) const = default;
  bool hasQuality() const { return !quality.empty(); }
  SamplingQuality qualityTotal() const {
    SamplingQuality t;
    for (const auto& q : quality) t += q;
    return t;
  }
};

// A canonical CCT node (docs/design.md, "Data model"). The root has parent kNoIndex and kind Root.
struct CctNode {
  NodeId parent = kNoIndex;
  ScopeKind kind = ScopeKind::Root;
  StringId name = 0;  // procedure (ProcFrame, Alien)
  StringId file = 0;
  StringId module = 0;  // load module (ProcFrame)
  std::uint32_t line = 0;
  bool operator==(const CctNode&) const = default;
};

// A non-finalized accumulator of a CCT node or region (docs/design.md, "Data model"), encoded by metrics/.
struct Accumulator {
  MetricId metric = 0;
  MetricScope scope = MetricScope::Exclusive;
  std::string bytes;
  bool operator==(const Accumulator&) const = default;
};

// Distribution data of a (node, metric, scope) for one population (format 1.4): for all threads
// the histogram of the per-thread values (divided by the metric's period) only; for a thread
// class its accumulator and histogram. Encoded by metrics/.
struct DistributionEntry {
  MetricId metric = 0;
  MetricScope scope = MetricScope::Exclusive;
  std::uint8_t population = kAllThreads;  // kAllThreads or a ThreadClass
  std::string accumulator;                // empty for kAllThreads (see summaries())
  std::string histogram;
  bool operator==(const DistributionEntry&) const = default;
};

// One non-zero per-thread value, seen from a profile ...
struct ProfileValue {
  NodeId node = 0;
  MetricId metric = 0;
  MetricScope scope = MetricScope::Exclusive;
  std::uint64_t value = 0;
  bool operator==(const ProfileValue&) const = default;
};

// ... or from a node.
struct NodeValue {
  MetricId metric = 0;
  MetricScope scope = MetricScope::Exclusive;
  ProfileId profile = 0;
  std::uint64_t value = 0;
  bool operator==(const NodeValue&) const = default;
};

// One profile's values as columns, the form csp-prof-mpi computes them in: entries strictly
// ascending by (node, metric), each with its exclusive and its inclusive value (zeros are
// dropped). Written without first being turned into a list of ProfileValue.
struct ProfileValueColumns {
  std::span<const NodeId> node;
  std::span<const MetricId> metric;
  std::span<const std::uint64_t> exclusive;
  std::span<const std::uint64_t> inclusive;
};

// A node of the reduced region tree (docs/views.md, "Regions"). The root has parent kNoIndex.
struct RegionNode {
  RegionId parent = kNoIndex;
  StringId name = 0;
  std::uint64_t dynamicId = 0;
  bool operator==(const RegionNode&) const = default;
};

// Region event logs (format 1.2, docs/database-format.md "Region event logs"). A process is
// named by the smallest profile id among its threads.
struct RegionLogEvent {
  std::uint64_t timeNs = 0;  // CLOCK_MONOTONIC of the measured process
  RegionId region = 0;       // reduced region tree node entered or left
  bool enter = false;
  bool hasAttr = false;  // enter events only: csp_region_begin_attr's attribute
  std::int64_t attr = 0;
  bool operator==(const RegionLogEvent&) const = default;
};

struct RegionLogThread {
  ProfileId profile = 0;
  std::uint64_t events = 0;  // stored events
  std::uint64_t eventsLost = 0;
  std::uint64_t mismatchedEnds = 0;
  std::uint64_t unclosedAtExit = 0;
  bool operator==(const RegionLogThread&) const = default;
};

struct RegionLogProcess {
  ProfileId process = 0;  // the smallest profile id of its threads
  std::string hostname;
  std::uint64_t pid = 0;
  std::vector<RegionLogThread> threads;  // ascending profile ids
  bool operator==(const RegionLogProcess&) const = default;
};

// Clocks across processes and communication events (format 1.7, docs/database-format.md
// "Communication events"): per process its clock bounds against the reference process, per
// thread its MPI calls with their times as intervals on the reference clock, causality enforced.
struct ProcessClock {
  ProfileId process = 0;  // the smallest profile id of its threads
  std::string hostname;
  std::uint64_t pid = 0;
  std::int64_t rank = -1;  // MPI_COMM_WORLD rank, -1 unknown
  ClockSync clock;
  std::uint64_t tightened = 0;  // event bounds of this process narrowed by causality
  std::uint64_t conflicts = 0;  // matched events whose bounds contradicted causality (clock assumption broken)
  bool operator==(const ProcessClock&) const = default;
};

struct CommEventRecord {
  ProfileId thread = 0;
  CommKind kind = CommKind::Send;
  std::uint64_t localBeginNs = 0, localEndNs = 0;  // the process's CLOCK_MONOTONIC
  TimeInterval begin, end;                         // on the reference clock
  std::int32_t peer = 0, tag = 0;                  // world ranks; collectives: root, -1 all, -2 scan
  std::uint64_t comm = 0, sequence = 0;
  RegionId region = 0;  // innermost open region (reduced tree), 0 none
  // Format 1.8: a non-blocking operation's begin is its start, this the start of the wait or
  // test that completed it (= localBeginNs for a blocking call and in older databases); and which
  // collective (Unknown in older databases).
  std::uint64_t localWaitBeginNs = 0;  // 0: localBeginNs
  CollectiveOp op = CollectiveOp::Unknown;
  std::uint64_t waitBeginNs() const { return localWaitBeginNs > localBeginNs ? localWaitBeginNs : localBeginNs; }
  bool blocking() const { return localWaitBeginNs <= localBeginNs; }
  bool operator==(const CommEventRecord&) const = default;
};

// Reads one thread's stored events in time order, one block at a time: memory does not grow
// with the log. Throws DatabaseError if a block does not decode.
class RegionLogCursor {
 public:
  virtual ~RegionLogCursor() = default;
  virtual bool next(RegionLogEvent& out) = 0;  // false at the end
};

struct FormatVersion {
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
};

// The column families of a database, in the order used by tools and tests.
const std::vector<std::string>& databaseColumnFamilies();

// An open database. Read-only opens never modify the directory, so any number of readers may
// share one database while other databases are being written. The const members may be called
// from several threads at once.
// Bytes of the regular files under `dir` (a database's size on disk); 0 if unreadable.
std::uint64_t directoryBytes(const std::filesystem::path& dir);

class Database {
 public:
  enum class Mode { ReadOnly, ReadWrite };

  // Throws DatabaseError for a missing directory, a directory that is no CSP database, a newer
  // format major version, or a damaged database (RocksDB corruption, missing column family,
  // undecodable metadata).
  static std::unique_ptr<Database> open(const std::filesystem::path& dir, Mode mode = Mode::ReadOnly);

  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  const std::filesystem::path& directory() const;
  FormatVersion formatVersion() const;
  const DatabaseMetadata& metadata() const;  // read once at open
  const std::vector<StoredMetric>& metrics() const { return metadata().metrics; }

  std::optional<CctNode> node(NodeId id) const;
  // The whole canonical CCT, node id = position, in one forward scan (a per-node lookup costs a
  // seek each). Validated: every node present, kinds known, parents and string ids in range;
  // otherwise DatabaseError ("damaged database: ...").
  std::vector<CctNode> readCct() const;
  std::vector<NodeId> children(NodeId id) const;        // ascending ids
  std::vector<Accumulator> summaries(NodeId id) const;  // sorted by (metric, scope)
  // Histograms and per-thread-class accumulators of a node, sorted by (metric, scope,
  // population); empty for databases before format 1.4 (hasDistributions() is then false).
  std::vector<DistributionEntry> distributions(NodeId id) const;
  bool hasDistributions() const;
  // Every summary (resp. distributions entry) of the database in key order, without copies: the
  // views' and analyses' one scan of a whole family. The views are valid during the call only.
  // A malformed key or value throws DatabaseError ("damaged database: ...").
  void forEachSummary(const std::function<void(NodeId, MetricId, MetricScope, std::string_view accumulator)>& fn) const;
  void forEachDistribution(
      const std::function<void(NodeId, MetricId, MetricScope, std::uint8_t population, std::string_view accumulator,
                               std::string_view histogram)>& fn) const;

  std::vector<ProfileValue> profileValues(ProfileId profile) const;  // sorted by (node, metric, scope)
  std::vector<NodeValue> nodeValues(NodeId node) const;              // sorted by (metric, scope, profile)
  std::vector<NodeValue> nodeValues(NodeId node, MetricId metric, MetricScope scope) const;

  std::optional<RegionNode> region(RegionId id) const;
  // The reduced region tree, ids 0 .. metadata().regionCount-1.
  std::vector<RegionNode> regions() const;

  // True when the database has the region_events family (written by format 1.2 and later; it
  // may still be empty when nothing was measured with --region-log).
  bool hasRegionLogFamily() const;
  // The processes with stored region event logs, ascending process ids.
  std::vector<RegionLogProcess> regionLogProcesses() const;
  // One thread's events; an empty log for unknown (process, thread).
  std::unique_ptr<RegionLogCursor> regionLog(ProfileId process, ProfileId thread) const;
  // The same from the last block that starts before `fromNs` (the first block if none does):
  // every event at or after `fromNs` without reading the log before it, and the last event
  // before `fromNs`, which tells the regions open then (a region tree node is its path). Finds the block by a
  // binary search over the blocks' first events (one read each).
  std::unique_ptr<RegionLogCursor> regionLog(ProfileId process, ProfileId thread, std::uint64_t fromNs) const;
  std::vector<Accumulator> regionSummaries(RegionId id) const;

  // Format 1.7: the comm_events family (it may be empty: no MPI, or no --region-log).
  bool hasCommFamily() const;
  std::vector<ProcessClock> processClocks() const;                   // ascending process ids
  std::vector<CommEventRecord> commEvents(ProfileId process) const;  // by thread, then time

  // Bytes of table files per column family (after compression): for statistics and benchmarks.
  std::vector<std::pair<std::string, std::uint64_t>> columnFamilySizes() const;

  // Every key/value of one column family in key order: for tools, dumps and tests.
  void forEachEntry(const std::string& columnFamily,
                    const std::function<void(std::string_view key, std::string_view value)>& fn) const;

  struct Impl;

 private:
  explicit Database(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace csp::storage
