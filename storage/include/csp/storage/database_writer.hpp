// Building a database in parallel and publishing it atomically (docs/database-format.md).
//
//   root:            DatabaseBuilder b(target, {.force = f});   // temp dir + RocksDB instance
//                    hand b.stagingDir() to every writer process
//   every writer k:  ShardWriter w(stagingDir, k); w.put...(); w.finish();
//   root:            b.writeMetadata(meta); b.ingestShards(n); b.publish();
//
// Writers own disjoint key ranges per column family (e.g. a profile range for values by
// profile, a node range for values by node and summaries); ingestShards() rejects overlaps.
// Nothing here knows about MPI: processes only share the staging directory path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "csp/storage/bytes.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_blocks.hpp"
#include "csp/storage/publish.hpp"  // publication and cleanup of leftovers, used by the builder

namespace csp::storage {

// Sorted puts of one shard, written as SST files (one per column family) into the staging
// directory. Within a column family keys must ascend; families may interleave. Usable from any
// process that sees the staging directory. Programming errors (wrong order, writing after
// finish) throw std::logic_error; I/O failures throw DatabaseError.
struct ShardOptions {
  // By metric id: the unit its per-thread values are stored in (format 2.0; ValueScale in
  // bytes.hpp): a sampled count metric's period, so that what is stored is its sample counts.
  // Missing or 1: the values as they are. Each block names the scales it uses, so shards written
  // with and without scales read back alike.
  std::vector<std::uint64_t> valueScales;
};

// One node's values across profiles, collected as they are dealt out (profile after profile, each
// with its values at the node) into one open block per (metric, scope), encoded when the block is
// full or the node is written (format::encodeNodeBlock), and written with
// ShardWriter::putNodeBlocks(node, blocks): the same blocks as putNodeValues with the values
// sorted by (metric, scope, profile), without sorting or copying them first. Reusable: the
// writer empties it.
class NodeValueBlocks {
 public:
  // `valueScales` as ShardOptions::valueScales.
  explicit NodeValueBlocks(std::vector<std::uint64_t> valueScales = {});
  // A value of `profile`; within one (metric, scope) profiles must ascend. Zeros are dropped.
  void add(MetricId metric, MetricScope scope, ProfileId profile, std::uint64_t value) {
    if (value == 0) return;
    const std::size_t c = std::size_t{metric} << 1 | static_cast<std::size_t>(scope);
    if (c >= columnCount_) widen(c);
    Column& col = columns_[c];
    // Profiles ascend per column through the node's blocks (`next`: the least one allowed).
    if (profile < col.next) refuse(profile, static_cast<ProfileId>(col.next - 1));
    col.next = std::uint64_t{profile} + 1;
    const std::uint32_t at = col.count;  // in a local: the stores below may alias the fields
    col.profiles[at] = profile;
    col.values[at] = value;
    col.count = at + 1;
    if (at + 1 == blockValues_) seal(col);
  }
  bool empty() const;
  // Called with every block's profiles and values just before the block is encoded (when it is
  // full, or when the node is written), in the order the blocks are encoded: a reader of the
  // values that wants them grouped by (metric, scope) as the blocks hold them (the summaries of
  // csp-prof-mpi) instead of one at a time as they are dealt out. Empty: none.
  using BlockVisitor = std::function<void(MetricId metric, MetricScope scope, std::span<const ProfileId> profiles,
                                          std::span<const std::uint64_t> values)>;
  void visitBlocks(BlockVisitor visitor) { visitor_ = std::move(visitor); }

 private:
  friend class ShardWriter;
  struct Column {
    // The block being filled: its first `count` profiles and values (room for a whole block),
    // encoded when it is sealed or drained (format::encodeNodeBlock).
    std::vector<ProfileId> profiles;
    std::vector<std::uint64_t> values;
    std::uint32_t count = 0;
    std::uint64_t next = 0;                                 // the least profile the node's next value may have
    std::vector<std::pair<ProfileId, std::string>> sealed;  // full blocks before it
    std::size_t sealedCount = 0;                            // sealed[0, sealedCount) are in use
    ValueScale scale;                                       // of the column's metric
  };
  friend class NodeRunWriter;
  // Hands every block of `node` to emit(key, block) in key order (columns in ascending (metric,
  // scope), each its sealed blocks then the open one), empties the blocks and returns the number
  // of values they held.
  std::uint64_t drain(NodeId node, const std::function<void(const std::string& key, std::string_view block)>& emit);
  void widen(std::size_t column);
  void seal(Column& column);
  std::string_view encodeOpen(const Column& column);  // its open block, in buffer_
  [[noreturn]] static void refuse(ProfileId profile, ProfileId previous);
  std::uint32_t blockValues_;
  std::vector<std::uint64_t> scales_;  // by metric
  std::vector<Column> columns_;
  // columns_.size(), kept by widen(): a Column is no power of two bytes long, and size() divides
  // by its size for every value added (13 million instructions of csp-prof-mpi at 256 profiles).
  std::size_t columnCount_ = 0;
  std::vector<char> buffer_;  // a block being encoded
  BlockVisitor visitor_;
};

class ShardWriter {
 public:
  ShardWriter(const std::filesystem::path& stagingDir, std::uint32_t shardIndex, const ShardOptions& options = {});
  ~ShardWriter();  // an unfinished shard leaves no files that ingestShards() would accept
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void putNode(NodeId id, const CctNode& node);
  void putChild(NodeId parent, NodeId child);
  // The whole canonical CCT (node ids = positions) and its children index.
  void putCct(std::span<const CctNode> nodes);
  void putSummary(NodeId node, MetricId metric, MetricScope scope, std::string_view bytes);
  // Histogram (all threads: `accumulator` empty) or a thread class's accumulator and histogram.
  void putDistribution(NodeId node, MetricId metric, MetricScope scope, std::uint8_t population,
                       std::string_view accumulator, std::string_view histogram);

  // One profile's values sorted by (node, metric, scope), no duplicates. Zeros are dropped.
  void putProfileValues(ProfileId profile, std::span<const ProfileValue> values);
  void putProfileColumns(ProfileId profile, const ProfileValueColumns& values);
  // The same values as blocks a ProfileBlockEncoder made with this shard's valueScales.
  void putProfileBlocks(ProfileId profile, const ProfileBlocks& blocks);
  // One node's values across profiles sorted by (metric, scope, profile). Zeros are dropped.
  void putNodeValues(NodeId node, std::span<const NodeValue> values);
  // The same from blocks filled value by value; empties `blocks`. Nothing is written for a node
  // without values.
  void putNodeBlocks(NodeId node, NodeValueBlocks& blocks);

  void putRegion(RegionId id, const RegionNode& region);
  void putRegionSummary(RegionId id, MetricId metric, MetricScope scope, std::string_view bytes);

  // Region event logs of one process (format 1.2): first the process, then each of its threads
  // in ascending profile id with its events in time order. Processes in ascending id.
  void putRegionLogProcess(const RegionLogProcess& process);
  void putRegionLogThread(ProfileId process, const RegionLogThread& thread, std::span<const RegionLogEvent> events);
  // Format 1.7: a process's clock and one thread's communication events.
  void putProcessClock(const ProcessClock& process);
  void putCommEvents(ProfileId process, ProfileId thread, std::span<const CommEventRecord> events);

  // Closes the SST files and marks the shard complete (an atomic rename of its index file).
  void finish();

  std::uint64_t valuesWritten() const;  // non-zero per-thread values, both orders
  // Wall seconds spent in RocksDB's table writer on values (building, compressing and writing
  // its blocks; closing the files): the rest of a writer's time is encoding (the breakdown of
  // csp-prof-mpi's summary).
  double storeSeconds() const;

  struct Impl;

 private:
  friend void mergeNodeRuns(const std::filesystem::path&, std::span<const std::filesystem::path>, std::uint32_t);
  std::unique_ptr<Impl> impl_;
};

// One batch's values by node as a provisional run: the blocks of NodeValueBlocks, node after
// node, as plain (key, block) records in key order in one file, for mergeNodeRuns. Cheaper to
// write and to read back than a table file, which only pays for itself when read by key. A run
// ends with a trailer that counts its records, so that a file cut short is told from a short
// run. Throws DatabaseError naming the file when it cannot be written (a full disk).
class NodeRunWriter {
 public:
  explicit NodeRunWriter(std::filesystem::path file);  // creates or truncates it
  ~NodeRunWriter();
  NodeRunWriter(const NodeRunWriter&) = delete;
  NodeRunWriter& operator=(const NodeRunWriter&) = delete;
  // As ShardWriter::putNodeBlocks: nodes ascend; empties `blocks`. `inclusiveIsExclusive`: the
  // node's inclusive values are its exclusive ones (a CCT leaf): only the exclusive columns were
  // filled, and mergeNodeRuns writes each of their blocks also as the inclusive one.
  void putNodeBlocks(NodeId node, NodeValueBlocks& blocks, bool inclusiveIsExclusive = false);
  void finish();                                         // writes the rest and the trailer, closes the file
  double storeSeconds() const { return storeSeconds_; }  // writing the file (system calls)

 private:
  void flush();
  std::filesystem::path file_;
  int fd_ = -1;
  std::string buffer_;
  std::uint64_t records_ = 0;
  NodeId nextNode_ = 0;  // the smallest node putNodeBlocks accepts
  double storeSeconds_ = 0;
};

// Merges finished runs (NodeRunWriter) into the values-by-node family of the new shard
// `output`, in key order; keys must not repeat across runs. The runs are removed. Throws
// DatabaseError naming the run that is missing, unfinished or damaged.
void mergeNodeRuns(const std::filesystem::path& stagingDir, std::span<const std::filesystem::path> runs,
                   std::uint32_t output);

struct BuildOptions {
  bool force = false;  // replace an existing database at the target
  // Called at each step of building and publishing ("created", "ingested", "closed",
  // "manifest", "published", ...): progress output, and crash tests kill the process there.
  std::function<void(std::string_view step)> onStep;
  // The constructor checks the target and makes the temporary directory and its staging area
  // only; openDatabase() then creates the RocksDB instance (its files and their fsyncs, tens of
  // milliseconds), for instance on another thread while the shards are being written.
  bool openLater = false;
};

class DatabaseBuilder {
 public:
  // Fails (DatabaseError) if the target exists and force is off, or if the target exists and is
  // not a CSP database (never replaced, even with force). Cleans up temporary directories of
  // dead earlier runs (see leftovers()), then creates ".<name>.tmp-<pid>" next to the target
  // with the RocksDB instance and its staging area.
  DatabaseBuilder(std::filesystem::path target, BuildOptions options = {});
  ~DatabaseBuilder();  // removes the temporary directory unless published
  DatabaseBuilder(const DatabaseBuilder&) = delete;
  DatabaseBuilder& operator=(const DatabaseBuilder&) = delete;

  const std::filesystem::path& target() const;
  const std::filesystem::path& tempDir() const;
  std::filesystem::path stagingDir() const;
  // The temporary directory a builder of `target` in this process creates (publish.hpp's
  // temporaryDirectoryFor), known before it exists (so that cleanup on a termination signal can
  // be armed first), and the staging area in it.
  static std::filesystem::path temporaryDirectoryFor(const std::filesystem::path& target);
  static std::filesystem::path stagingDirIn(const std::filesystem::path& temporaryDirectory);
  const std::vector<LeftoverReport>& leftovers() const;

  // With BuildOptions::openLater: creates the RocksDB instance (once; the "created" step). May
  // run on another thread than the rest, before any of the calls below; on failure the database
  // is closed, and the destructor removes the directory.
  void openDatabase();

  // Small metadata, written directly. Call once.
  void writeMetadata(const DatabaseMetadata& metadata);
  // Ingests the SST files of shards 0 .. shardCount-1, all column families in one atomic step.
  // Every shard must have finished; key ranges of different shards must not overlap.
  void ingestShards(std::uint32_t shardCount);
  // Flushes, closes, writes the manifest and renames the directory into place (an atomic
  // exchange when the target exists and force is on). After this the builder is spent.
  void publish();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace csp::storage
