// The stages of csp-prof-mpi after the pipeline (pipeline.hpp) has the canonical CCT and hands
// out per-thread values batch by batch. Each stage has one job; prof.cpp runs them in order:
//
//   ShardPlan          which shard numbers a rank writes
//   ProfileValueSink   values by profile, batch by batch, into the rank's main shard
//   NodeValueSink      values by node: a provisional shard per batch, merged into one sorted run
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

namespace csp::reduce::prof {

// Rank r owns shard 2r (its profiles' values by profile, its node range's summaries, and on the
// root the CCT and regions) and shard 2r+1 (its values by node, merged from provisional
// per-batch shards numbered past every final shard).
struct ShardPlan {
  explicit ShardPlan(const Comm& comm);
  std::uint32_t main = 0;
  std::uint32_t byNode = 0;
  std::uint32_t total = 0;            // final shards of all ranks
  std::uint32_t provisionalBase = 0;  // this rank's per-batch shards
};

// Values by profile: a batch's profiles into the main shard.
void writeValuesByProfile(storage::ShardWriter& shard, std::span<const ProfileInfo> batch,
                          const std::vector<ThreadValues>& values);

// Values by node: one provisional shard per batch (a counting sort of the batch by node), merged
// into the rank's by-node shard at the end (the transpose from profile order to node order).
class NodeValueSink {
 public:
  NodeValueSink(std::filesystem::path stagingDir, const ShardPlan& plan, std::uint32_t nodeCount,
                std::size_t metricCount);
  void write(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values);
  void merge(const Comm& comm);  // after the last batch

 private:
  std::filesystem::path staging_;
  ShardPlan plan_;
  std::uint32_t nodes_;
  std::size_t metrics_;
  std::vector<std::uint32_t> shards_;
};

// Summary accumulators of this rank, dense over (population, node, metric, scope): exact integer
// accumulators and log-linear histograms (of value / period: sample counts) for raw metrics; for
// derived (real-valued) metrics the dyadic blocks of a fixed binary tree over the global batch
// numbers, so that the floating-point result does not depend on how batches are spread over
// processes. Population 0 is all threads; when the run has threads of two or more classes, each
// class present gets a population of its own (the `distributions` family).
class SummaryTable {
 public:
  SummaryTable(std::uint32_t nodeCount, std::vector<std::uint64_t> rawPeriods, std::size_t derivedCount,
               const std::vector<std::uint8_t>& threadClassOf);
  // One batch (parallel over node ranges: each task owns its nodes, so no copies and no locks).
  void accumulate(std::size_t batchIndex, std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values);
  // Reduce-scatter by node range: rank r owns nodes [r·N/P, (r+1)·N/P), receives the partial
  // accumulators of its range from every rank in rank order (= batch order) and writes the
  // combined ones into `shard`.
  void exchangeAndWrite(const Comm& comm, storage::ShardWriter& shard);

  struct Piece {
    std::uint32_t level = 0;
    std::uint64_t index = 0;  // the block covers batches [index << level, (index + 1) << level)
    metrics::RealAccumulator acc;
  };

 private:
  std::size_t rawIndex(std::size_t slice, std::uint32_t node, std::size_t metric, std::size_t scope) const {
    return ((slice * nodes_ + node) * raw_ + metric) * 2 + scope;
  }
  std::size_t derivedIndex(std::size_t slice, std::uint32_t node, std::size_t metric, std::size_t scope) const {
    return ((slice * nodes_ + node) * derived_ + metric) * 2 + scope;
  }

  std::uint32_t nodes_;
  std::vector<std::uint64_t> periods_;
  std::size_t raw_, derived_;
  const std::vector<std::uint8_t>& classOf_;  // profile id -> storage::ThreadClass
  std::vector<std::uint8_t> population_;      // slice -> population tag (0: all threads, else the class)
  std::uint8_t sliceOf_[storage::kThreadClassCount + 1] = {};  // class -> slice (0: not kept apart)
  std::vector<metrics::IntAccumulator> rawAcc_;
  std::vector<metrics::LogLinearHistogram> rawHist_;
  std::vector<std::vector<Piece>> derivedStacks_;
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
storage::DatabaseMetadata assembleMetadata(const ProfOptions& options, Pipeline& pipeline,
                                           const std::vector<std::vector<std::byte>>& identities,
                                           std::vector<std::string>& warnings);

}  // namespace csp::reduce::prof
