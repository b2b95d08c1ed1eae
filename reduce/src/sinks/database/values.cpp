// Per-thread values into the database in both orders: by profile (main shard) and by node
// (provisional per-batch shards merged into one sorted run per rank).
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
  std::vector<storage::ProfileValue> pv;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const ThreadValues& v = values[i];
    pv.clear();
    for (std::size_t k = 0; k < v.size(); ++k) {
      if (v.exclusive[k]) pv.push_back({v.node[k], v.metric[k], storage::MetricScope::Exclusive, v.exclusive[k]});
      if (v.inclusive[k]) pv.push_back({v.node[k], v.metric[k], storage::MetricScope::Inclusive, v.inclusive[k]});
    }
    shard.putProfileValues(batch[i].id, pv);
  }
}

NodeValueSink::NodeValueSink(fs::path stagingDir, const ShardPlan& plan, std::uint32_t nodeCount,
                             std::size_t metricCount)
    : staging_(std::move(stagingDir)), plan_(plan), nodes_(nodeCount), metrics_(metricCount) {}

void NodeValueSink::write(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values) {
  shards_.push_back(plan_.provisionalBase + static_cast<std::uint32_t>(shards_.size()));
  storage::ShardWriter shard(staging_, shards_.back(), {.provisional = true});
  // Counting sort of the batch's entries by node; scattering profiles in id order keeps each
  // node's entries sorted by profile.
  auto& start = start_;
  start.assign(std::size_t{nodes_} + 1, 0);
  std::size_t entries = 0;
  for (const auto& v : values) {
    for (auto n : v.node) ++start[n + 1];
    entries += v.size();
  }
  for (std::uint32_t n = 0; n < nodes_; ++n) start[n + 1] += start[n];
  auto& items = items_;  // (profile in batch, entry)
  items.resize(entries);
  {
    std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
    for (std::uint32_t i = 0; i < batch.size(); ++i)
      for (std::uint32_t k = 0; k < values[i].size(); ++k) items[fill[values[i].node[k]]++] = {i, k};
  }
  // Each node's list sorted by (metric, scope, profile): its entries come in profile order, so
  // dealing them out to one list per (metric, scope) in one pass keeps every list sorted.
  auto& lists = lists_;
  lists.resize(metrics_ * 2);
  auto& nv = nodeValues_;
  for (std::uint32_t node = 0; node < nodes_; ++node) {
    if (start[node] == start[node + 1]) continue;
    for (std::uint32_t at = start[node]; at < start[node + 1]; ++at) {
      const auto [i, k] = items[at];
      const ThreadValues& v = values[i];
      const std::uint16_t m = v.metric[k];
      if (v.exclusive[k]) lists[2 * m].push_back({m, storage::MetricScope::Exclusive, batch[i].id, v.exclusive[k]});
      if (v.inclusive[k]) lists[2 * m + 1].push_back({m, storage::MetricScope::Inclusive, batch[i].id, v.inclusive[k]});
    }
    nv.clear();
    for (auto& list : lists) {
      nv.insert(nv.end(), list.begin(), list.end());
      list.clear();
    }
    shard.putNodeValues(node, nv);
  }
  shard.finish();
}

void NodeValueSink::merge(const Comm& comm) {
  faultPoint(comm, "merge");
  storage::mergeShards(staging_, shards_, plan_.byNode);
}

}  // namespace csp::reduce::dbsink
