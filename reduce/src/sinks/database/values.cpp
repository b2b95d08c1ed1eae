// Per-thread values into the database in both orders: by profile (main shard) and by node
// (a provisional run per batch, merged into the rank's by-node shard).
#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <stdexcept>

#include "stages.hpp"

namespace csp::reduce::dbsink {

namespace fs = std::filesystem;

ShardPlan::ShardPlan(const Comm& comm)
    : main(2 * static_cast<std::uint32_t>(comm.rank())),
      byNode(main + 1),
      total(2 * static_cast<std::uint32_t>(comm.size())),
      rank(static_cast<std::uint32_t>(comm.rank())) {}

void writeValuesByProfile(storage::ShardWriter& shard, std::span<const ProfileInfo> batch,
                          const std::vector<ThreadValues>& values) {
  // Values not encoded while they were collected (derived metrics, or more metrics than the
  // encoder's masks hold) go through the general writer, which takes columns.
  std::vector<std::uint32_t> node;
  std::vector<std::uint16_t> metric;
  std::vector<std::uint64_t> exclusive, inclusive;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const ThreadValues& v = values[i];
    if (v.byProfile.made) {
      shard.putProfileBlocks(batch[i].id, v.byProfile);
      continue;
    }
    node.resize(v.size());
    metric.resize(v.size());
    exclusive.resize(v.size());
    inclusive.resize(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) {
      node[k] = v.rows[k].node;
      metric[k] = v.rows[k].metric;
      exclusive[k] = v.rows[k].exclusive;
      inclusive[k] = v.rows[k].inclusive;
    }
    shard.putProfileColumns(batch[i].id, storage::ProfileValueColumns{node, metric, exclusive, inclusive});
  }
}

std::vector<std::uint8_t> leavesOf(const FinalCct& cct) {
  std::vector<std::uint8_t> leaf(cct.size());
  for (std::uint32_t n = 0; n < cct.size(); ++n) leaf[n] = cct.children(n).empty() ? 1 : 0;
  return leaf;
}

NodeValueSink::NodeValueSink(fs::path stagingDir, const ShardPlan& plan, const std::vector<std::uint8_t>& leaf,
                             std::vector<std::uint64_t> valueScales)
    : staging_(std::move(stagingDir)),
      plan_(plan),
      nodes_(static_cast<std::uint32_t>(leaf.size())),
      leaf_(leaf),
      blocks_(std::move(valueScales)) {}

void NodeValueSink::write(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                          SummaryTable& summaries) {
  runs_.push_back(staging_ / fmt::format("values-by-node-run-{}-{}", plan_.rank, runs_.size()));
  storage::NodeRunWriter run(runs_.back());
  std::size_t entries = 0;
  for (const auto& v : values) entries += v.size();
  // The summaries take each block as it is completed; the visitor goes with the batch.
  blocks_.visitBlocks([&summaries](storage::MetricId metric, storage::MetricScope scope,
                                   std::span<const storage::ProfileId> profiles,
                                   std::span<const std::uint64_t> blockValues) {
    summaries.addBlock(metric, scope, profiles, blockValues);
  });
  struct Unvisit {
    storage::NodeValueBlocks& blocks;
    ~Unvisit() { blocks.visitBlocks({}); }
  } unvisit{blocks_};
  // Walking every node with one cursor per profile reads each profile's values in order (they
  // are sorted by node) and needs no index; it costs nodes x profiles steps, so a batch whose
  // profiles are sparse on a big tree is sorted by node instead.
  if (std::size_t{nodes_} * batch.size() <= 4 * entries)
    dealByCursors(batch, values, run, summaries);
  else
    dealByCountingSort(batch, values, entries, run, summaries);
  run.finish();
  storeSeconds_ += run.storeSeconds();
}

// A node's entries, in profile order, are collected into one block per (metric, scope) as they
// come (deal): every block's profiles ascend, and the blocks are encoded and written in (metric,
// scope) order.
void NodeValueSink::putNode(std::uint32_t node, storage::NodeRunWriter& run) {
  run.putNodeBlocks(node, blocks_, leaf_[node] != 0);
}

void NodeValueSink::leafMismatch(std::uint32_t node) {
  throw std::logic_error(fmt::format("node {} has no children but an inclusive value unlike its exclusive one", node));
}

void NodeValueSink::dealByCursors(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                                  storage::NodeRunWriter& run, SummaryTable& summaries) {
  constexpr std::uint32_t kDone = UINT32_MAX;
  const auto count = static_cast<std::uint32_t>(batch.size());
  auto& cursors = cursors_;
  cursors.resize(count);
  // Per profile: the node of its next entry (kDone: none left). Finding a node's profiles reads
  // this one small array instead of every profile's columns, most of which have no value there.
  // Padded to whole groups of four with a node no loop reaches (profilesAt).
  auto& next = next_;
  next.assign((count + 3) / 4 * 4, kDone);
  for (std::uint32_t i = 0; i < count; ++i) {
    const ThreadValues& v = values[i];
    cursors[i] = {v.rows.data(), 0, static_cast<std::uint32_t>(v.size()), batch[i].id};
    if (v.size() != 0) next[i] = v.rows[0].node;
  }
  auto& here = here_;      // the profiles with values at the node, ascending
  here.resize(count + 4);  // room for the scan's four-wide stores past the last match
  for (std::uint32_t node = 0; node < nodes_; ++node) {
    const std::uint32_t found = profilesAt(next.data(), count, node, here.data());
    if (found == 0) continue;
    const bool leaf = leaf_[node] != 0;
    summaries.beginNode(node);
    for (std::uint32_t j = 0; j < found; ++j) {
      const std::uint32_t i = here[j];
      Cursor& c = cursors[i];
      // In locals: the blocks' stores (32-bit profile ids among them) may alias the cursor's
      // 32-bit fields.
      const ThreadValue* rows = c.rows;
      const std::uint32_t size = c.size, id = c.id;
      std::uint32_t k = c.at;
      for (; k < size && rows[k].node == node; ++k) deal(node, id, rows[k], leaf);
      c.at = k;
      next[i] = k < size ? rows[k].node : kDone;
      // A batch's profiles are too many streams for the hardware prefetcher: ask for each
      // cursor's next line while the other profiles are dealt out.
      __builtin_prefetch(rows + std::min<std::size_t>(k + 4, size - 1));
    }
    putNode(node, run);
    summaries.endNode(node);
  }
}

// The profiles i < count whose next node is `node`, ascending, into `here`; their number. Four
// profiles at a time, without a branch per profile (the matches are hard to predict, about one
// profile in four at a node): SSE2's compare gives a 4-bit mask, and a table turns the mask into
// the matching lanes' offsets, stored four at a time (`here` has room for the last store past the
// last match, `next` is padded to whole groups of four with kDone).
std::uint32_t NodeValueSink::profilesAt(const std::uint32_t* next, std::uint32_t count, std::uint32_t node,
                                        std::uint32_t* here) {
#if !defined(__SSE2__)  // one profile at a time, still without a branch per profile
  std::uint32_t found = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    here[found] = i;
    found += next[i] == node ? 1 : 0;
  }
  return found;
#else
  struct Lanes {
    alignas(16) std::uint32_t offset[4];
    std::uint32_t matches;
  };
  static constexpr auto kLanes = [] {
    std::array<Lanes, 16> t{};
    for (std::uint32_t mask = 0; mask < 16; ++mask) {
      std::uint32_t n = 0;
      for (std::uint32_t lane = 0; lane < 4; ++lane)
        if (mask >> lane & 1) t[mask].offset[n++] = lane;
      t[mask].matches = n;
    }
    return t;
  }();
  const __m128i wanted = _mm_set1_epi32(static_cast<int>(node));
  std::uint32_t found = 0;
  for (std::uint32_t i = 0; i < count; i += 4) {
    const __m128i group = _mm_loadu_si128(reinterpret_cast<const __m128i*>(next + i));
    const auto mask = static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(group, wanted))));
    const Lanes& lanes = kLanes[mask];
    const __m128i at = _mm_add_epi32(_mm_set1_epi32(static_cast<int>(i)),
                                     _mm_load_si128(reinterpret_cast<const __m128i*>(lanes.offset)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(here + found), at);
    found += lanes.matches;
  }
  return found;
#endif
}

void NodeValueSink::dealByCountingSort(std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
                                       std::size_t entries, storage::NodeRunWriter& run, SummaryTable& summaries) {
  // Scattering profiles in id order keeps each node's entries sorted by profile.
  auto& start = start_;
  start.assign(std::size_t{nodes_} + 1, 0);
  for (const auto& v : values)
    for (const ThreadValue& r : v.rows) ++start[r.node + 1];
  for (std::uint32_t n = 0; n < nodes_; ++n) start[n + 1] += start[n];
  auto& items = items_;  // (profile in batch, entry)
  items.resize(entries);
  {
    std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
    for (std::uint32_t i = 0; i < batch.size(); ++i)
      for (std::uint32_t k = 0; k < values[i].size(); ++k) items[fill[values[i].rows[k].node]++] = {i, k};
  }
  for (std::uint32_t node = 0; node < nodes_; ++node) {
    if (start[node] == start[node + 1]) continue;
    const bool leaf = leaf_[node] != 0;
    summaries.beginNode(node);
    for (std::uint32_t at = start[node]; at < start[node + 1]; ++at) {
      const auto [i, k] = items[at];
      deal(node, batch[i].id, values[i].rows[k], leaf);
    }
    putNode(node, run);
    summaries.endNode(node);
  }
}

void NodeValueSink::merge(const Comm& comm) {
  faultPoint(comm, "merge");
  storage::mergeNodeRuns(staging_, runs_, plan_.byNode);
}

}  // namespace csp::reduce::dbsink
