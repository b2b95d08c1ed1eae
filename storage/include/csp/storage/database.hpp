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
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::storage {

inline constexpr std::uint32_t kDatabaseFormatMajor = 1;
inline constexpr std::uint32_t kDatabaseFormatMinor = 1;  // 1.1 added the sampling quality
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

// How per-thread values of a metric are to be read. Raw metrics are integer counts (value =
// count x period); a per-thread derived metric may be real-valued, stored as the bit pattern of
// a double so that the tensor stays one integer type.
enum class ValueType : std::uint8_t { Count = 0, Real = 1 };

struct StoredMetric {
  MetricDescriptor descriptor;
  ValueType valueType = ValueType::Count;
  bool operator==(const StoredMetric&) const = default;
};

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

// csp-prof-mpi warns (and csp-views --info marks) when more than this share of the samples is
// truncated or dropped.
inline constexpr double kQualityWarningShare = 0.10;

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
  std::vector<IdTuple> profiles;     // ProfileId -> id tuple
  std::vector<std::string> strings;  // StringId -> text; strings[0] == ""
  std::vector<SkippedInput> skipped;
  std::vector<Setting> properties;   // free key/value, keys unique; read back sorted by key
  // Sampling quality per profile (ProfileId -> quality) and its sum. Empty in databases of
  // format 1.0, which did not record it; otherwise one entry per profile.
  std::vector<SamplingQuality> quality;
  bool operator==(const DatabaseMetadata&) const = default;
  bool hasQuality() const { return !quality.empty(); }
  SamplingQuality qualityTotal() const {
    SamplingQuality t;
    for (const auto& q : quality) t += q;
    return t;
  }
};

// A canonical CCT node (DESIGN.md 3.2). The root has parent kNoIndex and kind Root.
struct CctNode {
  NodeId parent = kNoIndex;
  ScopeKind kind = ScopeKind::Root;
  StringId name = 0;    // procedure (ProcFrame, Alien)
  StringId file = 0;
  StringId module = 0;  // load module (ProcFrame)
  std::uint32_t line = 0;
  bool operator==(const CctNode&) const = default;
};

// A non-finalized accumulator of a CCT node or region (DESIGN.md 3.3), encoded by metrics/.
struct Accumulator {
  MetricId metric = 0;
  MetricScope scope = MetricScope::Exclusive;
  std::string bytes;
  bool operator==(const Accumulator&) const = default;
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

// A node of the reduced region tree (DESIGN.md 8). The root has parent kNoIndex.
struct RegionNode {
  RegionId parent = kNoIndex;
  StringId name = 0;
  std::uint64_t dynamicId = 0;
  bool operator==(const RegionNode&) const = default;
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
  std::vector<NodeId> children(NodeId id) const;  // ascending ids
  std::vector<Accumulator> summaries(NodeId id) const;  // sorted by (metric, scope)

  std::vector<ProfileValue> profileValues(ProfileId profile) const;  // sorted by (node, metric, scope)
  std::vector<NodeValue> nodeValues(NodeId node) const;  // sorted by (metric, scope, profile)
  std::vector<NodeValue> nodeValues(NodeId node, MetricId metric, MetricScope scope) const;

  std::optional<RegionNode> region(RegionId id) const;
  std::vector<Accumulator> regionSummaries(RegionId id) const;

  // Built views, keyed by the caller. Never needed for correctness: a miss means "rebuild".
  std::optional<std::string> cachedView(std::string_view key) const;
  // Only for databases opened ReadWrite; throws DatabaseError otherwise.
  void cacheView(std::string_view key, std::string_view blob);

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
