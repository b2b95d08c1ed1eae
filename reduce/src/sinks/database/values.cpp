// Per-thread values into the database in both orders: by profile (main shard) and by node
// (provisional per-batch shards merged into one sorted run per rank).
#include <algorithm>

#include "stages.hpp"

namespace csp::reduce::dbsink {

namespace fs = std::filesystem;

ShardPlan::ShardPlan(const Comm& comm)
    : main(2 * static_cast<std::uint32_t>(comm.rank())),
      byNode(main + 1),
      total(2 * static_cast<std::uint32_t>(comm.size())),
      provisionalBase(total + static_cast<std::uint32_t>(comm.rank()) * 1'000'000u) {}

void writeValuesByProfile(storage::ShardWriter& shard, std::span<const ProfileInfo> batch,
                          const std::vector<ThreadValues>& values) {
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const ThreadValues& v = values[i];
    shard.putProfileColumns(batch[i].id, storage::ProfileValueColumns{v.node, v.metric, v.exclusive, v.inclusive});
  }
}

NodeValueSink::NodeValueSink(fs::path stagingDir, const ShardPlan& plan, std::uint32_t nodeCount,
                             std::vector<std::uint64_t> valueScales)
    : staging_(std::move(stagingDir)), plan_(plan), nodes_(nodeCount), blocks_(std::move(valueScales)) {}

void NodeValueSink::write(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                          SummaryTable& summaries) {
  shards_.push_back(plan_.provisionalBase + static_cast<std::uint32_t>(shards_.size()));
  storage::ShardWriter shard(staging_, shards_.back(), {.provisional = true, .valueScales = {}});
  std::size_t entries = 0;
  for (const auto& v : values) entries += v.size();
  // Walking every node with one cursor per profile reads each profile's values in order (they
  // are sorted by node) and needs no index; it costs nodes x profiles steps, so a batch whose
  // profiles are sparse on a big tree is sorted by node instead.
  if (std::size_t{nodes_} * batch.size() <= 4 * entries)
    dealByCursors(batch, values, shard, summaries);
  else
    dealByCountingSort(batch, values, entries, shard, summaries);
  shard.finish();
  storeSeconds_ += shard.storeSeconds();
}

// A node's entries, in profile order, are encoded into one block per (metric, scope) as they
// come (deal): every block's profiles ascend, and the blocks are written in (metric, scope) order.
void NodeValueSink::putNode(std::uint32_t node, storage::ShardWriter& shard) { shard.putNodeBlocks(node, blocks_); }

void NodeValueSink::dealByCursors(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                                  storage::ShardWriter& shard, SummaryTable& summaries) {
  auto& at = start_;  // per profile: its first entry not dealt out yet
  at.assign(batch.size(), 0);
  for (std::uint32_t node = 0; node < nodes_; ++node) {
    bool any = false;
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
      const ThreadValues& v = values[i];
      std::uint32_t k = at[i];
      if (k == v.size() || v.node[k] != node) continue;
      for (; k < v.size() && v.node[k] == node; ++k) {
        deal(batch[i].id, v, k);
        summaries.add(i, node, v.metric[k], v.exclusive[k], v.inclusive[k]);
      }
      // A batch's profiles are too many streams for the hardware prefetcher: ask for each
      // cursor's next lines while the other profiles are dealt out.
      const std::size_t ahead = std::min<std::size_t>(k + 8, v.size() - 1);
      __builtin_prefetch(v.node.data() + ahead);
      __builtin_prefetch(v.metric.data() + ahead);
      __builtin_prefetch(v.exclusive.data() + ahead);
      __builtin_prefetch(v.inclusive.data() + ahead);
      any = true;
      at[i] = k;
    }
    if (any) {
      putNode(node, shard);
      summaries.endNode(node);
    }
  }
}

void NodeValueSink::dealByCountingSort(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                                       std::size_t entries, storage::ShardWriter& shard, SummaryTable& summaries) {
  // Scattering profiles in id order keeps each node's entries sorted by profile.
  auto& start = start_;
  start.assign(std::size_t{nodes_} + 1, 0);
  for (const auto& v : values)
    for (auto n : v.node) ++start[n + 1];
  for (std::uint32_t n = 0; n < nodes_; ++n) start[n + 1] += start[n];
  auto& items = items_;  // (profile in batch, entry)
  items.resize(entries);
  {
    std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
    for (std::uint32_t i = 0; i < batch.size(); ++i)
      for (std::uint32_t k = 0; k < values[i].size(); ++k) items[fill[values[i].node[k]]++] = {i, k};
  }
  for (std::uint32_t node = 0; node < nodes_; ++node) {
    if (start[node] == start[node + 1]) continue;
    for (std::uint32_t at = start[node]; at < start[node + 1]; ++at) {
      const auto [i, k] = items[at];
      const ThreadValues& v = values[i];
      deal(batch[i].id, v, k);
      summaries.add(i, node, v.metric[k], v.exclusive[k], v.inclusive[k]);
    }
    putNode(node, shard);
    summaries.endNode(node);
  }
}

void NodeValueSink::merge(const Comm& comm) {
  faultPoint(comm, "merge");
  storage::mergeShards(staging_, shards_, plan_.byNode);
}

}  // namespace csp::reduce::dbsink
