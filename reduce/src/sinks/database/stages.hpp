// The steps of the CSP database sink (sink.cpp, docs/database-format.md) after the pipeline
// (pipeline.hpp) has the canonical CCT and hands out per-thread values batch by batch. Each step
// has one job; sink.cpp runs them in order:
//
//   ShardPlan          which shard numbers a rank writes
//   writeValuesByProfile  values by profile, batch by batch, into the rank's main shard
//   NodeValueSink      values by node: a provisional run per batch, merged into one sorted shard
//   SummaryTable       summary accumulators per (node, metric, scope); the reduce-scatter that
//                      brings every node's partial accumulators to the rank owning its range
//   RegionSummaries    region accumulators: visits and times per thread, concurrency per process
//   Metadata           profile identities gathered at the root, the database metadata
//
// Only SummaryTable, RegionSummaries and the metadata gathering communicate, and only through
// the collectives of mpi_comm.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/histogram.hpp"
#include "csp/reduce/pipeline.hpp"
#include "csp/reduce/prof.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/storage/string_ids.hpp"

namespace csp::reduce::dbsink {

// Rank r owns shard 2r (its profiles' values by profile, its node range's summaries, and on the
// root the CCT and regions) and shard 2r+1 (its values by node, merged from provisional
// per-batch runs named by the rank and the batch).
struct ShardPlan {
  explicit ShardPlan(const Comm& comm);
  std::uint32_t main = 0;
  std::uint32_t byNode = 0;
  std::uint32_t total = 0;  // final shards of all ranks
  std::uint32_t rank = 0;
};

// Per node of `cct`: whether it has no children (SummaryTable and NodeValueSink keep a reference).
std::vector<std::uint8_t> leavesOf(const FinalCct& cct);

// Values by profile: a batch's profiles into the main shard.
void writeValuesByProfile(storage::ShardWriter& shard, std::span<const ProfileInfo> batch,
                          const std::vector<ThreadValues>& values);

// Summary accumulators of this rank, dense over (population, node, metric, scope): exact integer
// accumulators and log-linear histograms (of value / period: sample counts) for count metrics;
// for real-valued metrics (derived ones, real-valued measured ones) the dyadic blocks of a fixed
// binary tree over the global batch numbers, so that the floating-point result does not depend
// on how batches are spread over processes. Population 0 is all threads; when the run has
// threads of two or more classes, each class present gets a population of its own (the
// `distributions` family).
//
// A batch is fed node by node, as the by-node writer deals it out (NodeValueSink::write): each
// block of a node's values that the writer completes (one per metric and scope, in profile order)
// is added to the node's accumulators before it is encoded, while both are in cache, in one tight
// loop per block instead of a call per value as it is dealt out.
class SummaryTable {
 public:
  // `leaf`: per node of the canonical CCT, whether it has no children. Such a node has the same
  // inclusive and exclusive value in every profile (the by-node writer checks it), so its inclusive
  // summaries are its exclusive ones, accumulated once.
  SummaryTable(const std::vector<std::uint8_t>& leaf, const std::vector<MetricDescriptor>& metrics,
               const std::vector<std::uint8_t>& threadClassOf);
  // The batch whose values add() takes next.
  void beginBatch(std::size_t batchIndex, std::span<const ProfileInfo> batch);
  // The node whose values addBlock() takes next (nodes ascend within a batch).
  void beginNode(std::uint32_t node) { node_ = node; }
  // A block of the current node's values of `metric` in `scope`: the batch's profiles that have
  // a non-zero value there, ascending, and their values (NodeValueBlocks::visitBlocks: the
  // by-node writer's blocks, read once they are complete instead of value by value as they are
  // dealt out). A leaf has exclusive blocks only: they are its inclusive values too.
  void addBlock(storage::MetricId metric, storage::MetricScope scope, std::span<const storage::ProfileId> profiles,
                std::span<const std::uint64_t> values);
  // The batch's last value at `node` is in (real-valued metrics: its leaf block is complete).
  void endNode(std::uint32_t node) {
    if (!reals_.empty()) pushRealLeaves(node);
  }
  // Reduce-scatter by node range: rank r owns nodes [r·N/P, (r+1)·N/P), receives the partial
  // accumulators of its range from every rank in rank order (= batch order) and writes the
  // combined ones into `shard`, a node at a time. Releases the partial accumulators once they
  // are packed: the table is spent afterwards.
  void exchangeAndWrite(const Comm& comm, storage::ShardWriter& shard);

  struct Piece {
    std::uint32_t level = 0;
    std::uint64_t index = 0;  // the block covers batches [index << level, (index + 1) << level)
    metrics::RealAccumulator acc;
  };

 private:
  void packNode(Packer& p, std::uint32_t node) const;
  // `slot`: the metric's position among the count metrics (slotOf_), resp. the real ones.
  // A count metric's cells of a slice: per node, a leaf's one scope (its inclusive values are its
  // exclusive ones) or both scopes of every slot. `slice` must have cells (hasCountCells).
  std::size_t countIndex(std::size_t slice, std::uint32_t node, std::size_t slot, std::size_t scope) const {
    return countSliceStart_[slice] + nodeCells_[node] + (leaf_[node] ? slot : 2 * slot + scope);
  }
  bool hasCountCells(std::size_t slice) const { return countSliceStart_[slice] != kNoCells; }
  std::size_t realIndex(std::size_t slice, std::uint32_t node, std::size_t slot, std::size_t scope) const {
    return ((slice * nodes_ + node) * reals_.size() + slot) * 2 + scope;
  }
  // One value into its cell: its class's slice when classes are kept apart, else all threads'.
  // All threads' accumulator and histogram are then the sum of the slices, taken once per node
  // when they are packed (exact: integer sums, extremes by (value, profile), counts per bin),
  // instead of adding every value twice.
  void addRealBlock(std::size_t slot, std::size_t scope, std::span<const storage::ProfileId> profiles,
                    std::span<const std::uint64_t> values);
  std::size_t sliceOf(storage::ProfileId profile) const { return sliceOfProfile_[profile]; }  // classes kept apart
  void pushRealLeaves(std::uint32_t node);
  // The scope whose accumulators hold `scope`'s values at `node` (a leaf's inclusive: exclusive).
  std::size_t heldIn(std::uint32_t node, std::size_t scope) const { return leaf_[node] ? 0 : scope; }

  std::uint32_t nodes_;
  const std::vector<std::uint8_t>& leaf_;        // node -> has no children
  std::vector<std::uint16_t> counts_, reals_;    // metric ids of the count and real-valued metrics, ascending
  std::vector<std::uint32_t> slotOf_;            // metric id -> its slot among counts_ or reals_
  std::vector<std::uint8_t> isReal_;             // metric id -> real-valued
  std::vector<metrics::PeriodDivisor> periods_;  // count slot -> the metric's period (>= 1)
  const std::vector<std::uint8_t>& classOf_;     // profile id -> storage::ThreadClass
  std::vector<std::uint8_t> population_;         // slice -> population tag (0: all threads, else the class)
  std::uint8_t sliceOf_[storage::kThreadClassCount + 1] = {};  // class -> slice (0: not kept apart)
  std::vector<std::uint8_t> sliceOfProfile_;                   // profile id -> slice, when classes are kept apart
  // The count metrics' cells: per slice where its cells start (kNoCells: all threads' slice when
  // classes are kept apart and every profile has one, so that nothing is added there), per node
  // where its cells start within a slice (nodes_ + 1 entries).
  static constexpr std::size_t kNoCells = SIZE_MAX;
  std::size_t countSliceStart_[storage::kThreadClassCount + 1] = {};
  std::vector<std::size_t> nodeCells_;
  std::vector<metrics::IntAccumulator> countAcc_;
  std::vector<metrics::HistogramBuilder> countHist_;
  std::vector<std::vector<Piece>> realStacks_;
  // The batch being fed: its index, the node being fed, and that node's leaf accumulators of the
  // real-valued metrics by (slice, slot, scope), in profile order.
  std::size_t batchIndex_ = 0;
  std::uint32_t lastId_ = kNoIndex;  // the last profile of the batches so far
  std::uint32_t node_ = 0;
  std::vector<metrics::RealAccumulator> batchLeaf_;
  std::vector<std::uint8_t> batchLeafUsed_;
};

// Values by node: one provisional run per batch (the batch dealt out node by node; plain
// records, storage::NodeRunWriter), merged into the rank's by-node shard at the end (the
// transpose from profile order to node order).
class NodeValueSink {
 public:
  // `valueScales`: as storage::ShardOptions::valueScales.
  // `leaf`: per node of the canonical CCT, whether it has no children (its inclusive values are
  // its exclusive ones: they are encoded once, and their blocks written for both scopes).
  NodeValueSink(std::filesystem::path stagingDir, const ShardPlan& plan, const std::vector<std::uint8_t>& leaf,
                std::vector<std::uint64_t> valueScales);
  // Also feeds every value to `summaries` (beginBatch is the caller's), node by node, block by
  // block (SummaryTable::addBlock).
  void write(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values, SummaryTable& summaries);
  void merge(const Comm& comm);                          // after the last batch
  double storeSeconds() const { return storeSeconds_; }  // writing the batches' runs

 private:
  void dealByCursors(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                     storage::NodeRunWriter& run, SummaryTable& summaries);
  static std::uint32_t profilesAt(const std::uint32_t* next, std::uint32_t count, std::uint32_t node,
                                  std::uint32_t* here);
  void dealByCountingSort(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                          std::size_t entries, storage::NodeRunWriter& run, SummaryTable& summaries);
  void deal(std::uint32_t node, std::uint32_t profile, const ThreadValue& v, bool leaf) {
    blocks_.add(v.metric, storage::MetricScope::Exclusive, profile, v.exclusive);
    if (!leaf)
      blocks_.add(v.metric, storage::MetricScope::Inclusive, profile, v.inclusive);
    else if (v.inclusive != v.exclusive)
      leafMismatch(node);
  }
  // A node without children whose inclusive value in some profile differs from its exclusive one.
  [[noreturn]] static void leafMismatch(std::uint32_t node);
  void putNode(std::uint32_t node, storage::NodeRunWriter& run);
  std::filesystem::path staging_;
  ShardPlan plan_;
  std::uint32_t nodes_;
  const std::vector<std::uint8_t>& leaf_;
  double storeSeconds_ = 0;
  std::vector<std::filesystem::path> runs_;
  // Reused from batch to batch (megabytes each: allocated anew, they cost page faults).
  std::vector<std::uint32_t> start_;        // per node (counting sort)
  std::vector<std::uint32_t> next_, here_;  // cursors: per profile its next node; a node's profiles
  // A profile's place in its rows while a batch is dealt out: what the deal reads of it at a
  // node (its rows, position, size and id), in 24 bytes instead of its 88-byte ThreadValues and
  // its ProfileInfo (a batch's cursors stay in the core's first-level cache).
  struct Cursor {
    const ThreadValue* rows;
    std::uint32_t at;  // the first row not dealt out yet
    std::uint32_t size;
    std::uint32_t id;  // the profile's
  };
  std::vector<Cursor> cursors_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> items_;
  storage::NodeValueBlocks blocks_;  // the node being dealt out
};

// Region accumulators of this rank: visits and times from each thread's region tree, and from
// the event logs the concurrency of each process (for the processes whose first profile this
// rank holds).
class RegionSummaries {
 public:
  explicit RegionSummaries(std::size_t regionCount);
  void accumulate(std::span<const ProfileInfo> batch, const std::vector<RegionValues>& values);
  // Also stores the event logs of the processes whose first profile this rank holds in `shard`
  // (region_events, for csp-query; keyed by that profile id, so ranks never overlap).
  void addConcurrency(const Comm& comm, const Pipeline& pipeline, storage::ShardWriter& shard);
  // Gathered at the root (small), which writes them with the region tree.
  std::vector<std::vector<std::byte>> gather(const Comm& comm) const;
  static void write(const std::vector<std::vector<std::byte>>& parts, const std::vector<RegionTreeNode>& regions,
                    storage::StringIds& strings, storage::ShardWriter& shard);

 private:
  std::vector<metrics::IntAccumulator> acc_;  // region × slot
};

// Profile identities, gathered at the root in rank (= id) order.
std::vector<std::vector<std::byte>> gatherIdentities(const Comm& comm, const Pipeline& pipeline);
// The canonical CCT with its texts numbered in `strings` (first use order).
std::vector<storage::CctNode> cctNodes(Pipeline& pipeline, storage::StringIds& strings);
// The database metadata, at the root, from the gathered identities. `warnings` receives what
// the profiles say is missing from the measurement (ranks without profiles, ranks with fewer
// threads than most, temporaries of unfinished profiles), also stored as the property
// "measurement-warnings".
storage::DatabaseMetadata assembleMetadata(const std::string& title, Pipeline& pipeline,
                                           const std::vector<std::vector<std::byte>>& identities,
                                           std::vector<std::string>& warnings);

}  // namespace csp::reduce::dbsink
