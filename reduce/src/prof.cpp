#include "csp/reduce/prof.hpp"

#include <fmt/format.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/storage/profile_io.hpp"
#include "string_ids.hpp"

namespace csp::reduce {

namespace fs = std::filesystem;

namespace {

// Region summaries use their own small metric table (docs/database-format.md):
//   metric 0 "visits": completed visits, exclusive scope;
//   metric 1 "time": ns, exclusive and inclusive scopes.
//   metrics 2-6, from the region event logs of each process (DESIGN.md 8; Benavides' frames),
//   one value per process: 2 "any-time" (ns with at least one thread in the region), 3
//   "all-time" (ns with every logging thread in it), 4 "area" (thread-ns), 5 "straggler-time"
//   (ns with exactly one thread in it while the process has others), 6 "max-parallelism".
constexpr std::uint16_t kRegionVisits = 0;
constexpr std::uint16_t kRegionTime = 1;
constexpr std::size_t kRegionSlots = 8;  // visits E, time E, time I, and the five above

// Concurrency of regions within one process, from its threads' enter/exit logs merged in time
// order. A thread is in a region while the region is on its stack (nested regions included).
struct RegionConcurrency {
  std::uint64_t anyNs = 0, allNs = 0, areaNs = 0, stragglerNs = 0, maxParallelism = 0;
};

std::vector<RegionConcurrency> regionConcurrency(const std::vector<std::vector<std::uint32_t>>& threadRegions,
                                                 const std::vector<const RegionProfile*>& threads,
                                                 std::size_t regionCount) {
  struct Event {
    std::uint64_t t;
    std::uint32_t thread;
    std::uint32_t region;
    bool enter;
  };
  std::vector<Event> events;
  for (std::uint32_t th = 0; th < threads.size(); ++th) {
    const RegionProfile& r = *threads[th];
    for (std::size_t e = 0; e < r.eventTimeNs.size(); ++e)
      events.push_back({r.eventTimeNs[e], th, threadRegions[th][r.eventNode[e]], static_cast<bool>(r.eventIsEnter[e])});
  }
  // Stable: each thread's own order is kept for equal times.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
  const std::uint64_t threadCount = threads.size();
  std::vector<RegionConcurrency> out(regionCount);
  std::vector<std::uint64_t> inside(regionCount, 0), since(regionCount, 0);
  std::vector<std::vector<std::uint32_t>> stack(threads.size());
  auto flush = [&](std::uint32_t r, std::uint64_t t) {
    const std::uint64_t dt = t - since[r];
    if (inside[r] >= 1) {
      out[r].anyNs += dt;
      out[r].areaNs += inside[r] * dt;
      if (inside[r] == threadCount) out[r].allNs += dt;
      if (inside[r] == 1 && threadCount > 1) out[r].stragglerNs += dt;
    }
    since[r] = t;
  };
  for (const Event& e : events) {
    auto& st = stack[e.thread];
    if (e.enter) {
      flush(e.region, e.t);
      ++inside[e.region];
      out[e.region].maxParallelism = std::max(out[e.region].maxParallelism, inside[e.region]);
      st.push_back(e.region);
    } else if (!st.empty() && st.back() == e.region) {  // unmatched exits were counted at measurement
      flush(e.region, e.t);
      --inside[e.region];
      st.pop_back();
    }
  }
  return out;
}

// Summary accumulators of this rank, dense over (node, metric, scope).
class Summaries {
 public:
  Summaries(std::size_t nodes, std::size_t metrics) : metrics_(metrics), acc_(nodes * metrics * 2) {}
  metrics::IntAccumulator& at(std::uint32_t node, std::uint16_t metric, storage::MetricScope scope) {
    return acc_[(std::size_t{node} * metrics_ + metric) * 2 + static_cast<std::size_t>(scope)];
  }
  std::size_t metricCount() const { return metrics_; }

 private:
  std::size_t metrics_;
  std::vector<metrics::IntAccumulator> acc_;
};

// Real-valued (derived) summaries combined in a fixed binary tree over the global batch
// numbers, so that the floating-point result does not depend on how batches are spread over
// processes: every process folds its batches into aligned dyadic blocks, owners continue the
// same folding with the blocks of all processes in batch order.
struct Piece {
  std::uint32_t level = 0;
  std::uint64_t index = 0;  // block covers batches [index << level, (index + 1) << level)
  metrics::RealAccumulator acc;
};

void pushPiece(std::vector<Piece>& stack, Piece piece) {
  while (!stack.empty() && stack.back().level == piece.level && (piece.index & 1) && stack.back().index + 1 == piece.index) {
    Piece left = std::move(stack.back());
    stack.pop_back();
    left.acc.combine(piece.acc);
    piece = {piece.level + 1, piece.index >> 1, std::move(left.acc)};
  }
  stack.push_back(std::move(piece));
}

metrics::RealAccumulator foldPieces(const std::vector<Piece>& stack) {
  metrics::RealAccumulator out;
  for (const auto& p : stack) out.combine(p.acc);
  return out;
}

double fromBits(std::uint64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

std::uint32_t ownerStart(std::uint32_t nodes, int rank, int size) {
  return static_cast<std::uint32_t>(std::uint64_t{nodes} * static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(size));
}

std::vector<std::byte> toBytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string toString(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

std::uint64_t directoryBytes(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  return total;
}

}  // namespace

ProfSummary runProf(const Comm& comm, const ProfOptions& options, ProgressSink* progress) {
  const bool root = comm.rank() == 0;
  std::vector<PhaseTime> extraPhases;
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto since = [&](auto t0) { return std::chrono::duration<double>(now() - t0).count(); };
  double writeSeconds = 0;
  Pipeline pipeline(comm, options.pipeline, progress);

  // Fail fast on the output before any heavy work.
  std::optional<storage::DatabaseBuilder> builder;
  std::vector<std::string> errors;
  std::vector<std::byte> staging;
  if (root) {
    try {
      builder.emplace(options.output, storage::BuildOptions{options.force, {}});
      staging = toBytes(builder->stagingDir().string());
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  pipeline.agree(errors);
  comm.broadcast(staging);
  const fs::path stagingDir = toString(staging);

  pipeline.discover();
  pipeline.buildStructure();

  const FinalCct& cct = pipeline.cct();
  const auto nodeCount = static_cast<std::uint32_t>(cct.size());
  const std::size_t metricCount = pipeline.metrics().size();
  const std::uint32_t profiles = pipeline.profileCount();

  // Shard numbering: rank r owns shard 2r (its profiles' values by profile, its node range's
  // summaries, and on the root the CCT and regions) and shard 2r+1 (its values by node). The
  // latter is merged from provisional per-batch shards, numbered past every final shard.
  const std::uint32_t shardBase = 2 * static_cast<std::uint32_t>(comm.rank());
  const std::uint32_t shardTotal = 2 * static_cast<std::uint32_t>(comm.size());
  const std::uint32_t batchShardBase = shardTotal + static_cast<std::uint32_t>(comm.rank()) * 1'000'000u;
  std::vector<std::uint32_t> batchShards;

  std::uint64_t valuesWritten = 0;
  const std::size_t rawCount = pipeline.rawMetricCount();
  const std::size_t derivedCount = metricCount - rawCount;
  Summaries summaries(nodeCount, rawCount);
  // Per (node, derived metric, scope): the dyadic blocks folded so far.
  std::vector<std::vector<Piece>> derivedStacks(derivedCount ? std::size_t{nodeCount} * derivedCount * 2 : 0);
  std::vector<metrics::IntAccumulator> regionAcc(pipeline.regions().size() * kRegionSlots);
  std::optional<storage::ShardWriter> mainShard;
  errors.clear();
  try {
    mainShard.emplace(stagingDir, shardBase);
    pipeline.computeMetrics([&](std::size_t batchIndex, std::span<const ProfileInfo> batch,
                                std::vector<ThreadValues>& values, std::vector<RegionValues>& regionValues) {
      const auto writeStart = now();
      // Three independent jobs on the batch, run side by side: values by profile (main shard),
      // values by node (this batch's shard), summary accumulation.
      auto writeByProfile = [&] {
      std::vector<storage::ProfileValue> pv;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const ThreadValues& v = values[i];
        pv.clear();
        for (std::size_t k = 0; k < v.size(); ++k) {
          if (v.exclusive[k]) pv.push_back({v.node[k], v.metric[k], storage::MetricScope::Exclusive, v.exclusive[k]});
          if (v.inclusive[k]) pv.push_back({v.node[k], v.metric[k], storage::MetricScope::Inclusive, v.inclusive[k]});
        }
        mainShard->putProfileValues(batch[i].id, pv);
      }
      };
      auto writeByNode = [&] {
      // Values by node: one shard per batch. Cursors walk every profile's sorted values node
      // by node, so each node's list comes out sorted by (metric, scope, profile).
      batchShards.push_back(batchShardBase + static_cast<std::uint32_t>(batchShards.size()));
      storage::ShardWriter nodeShard(stagingDir, batchShards.back(), {.provisional = true});
      // Counting sort of the batch's entries by node; scattering profiles in id order keeps each
      // node's entries sorted by profile.
      std::vector<std::uint32_t> start(std::size_t{nodeCount} + 1, 0);
      std::size_t entries = 0;
      for (const auto& v : values) {
        for (auto n : v.node) ++start[n + 1];
        entries += v.size();
      }
      for (std::uint32_t n = 0; n < nodeCount; ++n) start[n + 1] += start[n];
      std::vector<std::pair<std::uint32_t, std::uint32_t>> items(entries);  // (profile in batch, entry)
      {
        std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
        for (std::uint32_t i = 0; i < batch.size(); ++i)
          for (std::uint32_t k = 0; k < values[i].size(); ++k) items[fill[values[i].node[k]]++] = {i, k};
      }
      std::vector<storage::NodeValue> nv;
      for (std::uint32_t node = 0; node < nodeCount; ++node) {
        if (start[node] == start[node + 1]) continue;
        nv.clear();
        for (std::uint16_t m = 0; m < metricCount; ++m) {
          for (auto scope : {storage::MetricScope::Exclusive, storage::MetricScope::Inclusive}) {
            for (std::uint32_t at = start[node]; at < start[node + 1]; ++at) {
              const auto [i, k] = items[at];
              const ThreadValues& v = values[i];
              if (v.metric[k] != m) continue;
              const std::uint64_t value = scope == storage::MetricScope::Exclusive ? v.exclusive[k] : v.inclusive[k];
              if (value) nv.push_back({m, scope, batch[i].id, value});
            }
          }
        }
        nodeShard.putNodeValues(node, nv);
      }
      nodeShard.finish();
      // Counted once, from the by-profile order: the by-node order holds the same values.
      };
      auto accumulate = [&] {
      // Summary accumulation, parallel over node ranges (each task owns its nodes, so no
      // per-worker copies of the summaries and no locks).
      constexpr std::uint32_t kChunk = 256;
        tbb::parallel_for(std::uint32_t{0}, (nodeCount + kChunk - 1) / kChunk, [&](std::uint32_t c) {
          const std::uint32_t lo = c * kChunk, hi = std::min(nodeCount, lo + kChunk);
          for (std::size_t i = 0; i < batch.size(); ++i) {
            const ThreadValues& v = values[i];
            auto k = static_cast<std::size_t>(std::lower_bound(v.node.begin(), v.node.end(), lo) - v.node.begin());
            for (; k < v.size() && v.node[k] < hi; ++k) {
              if (v.metric[k] >= rawCount) continue;
              if (v.exclusive[k]) summaries.at(v.node[k], v.metric[k], storage::MetricScope::Exclusive).accumulate(batch[i].id, v.exclusive[k]);
              if (v.inclusive[k]) summaries.at(v.node[k], v.metric[k], storage::MetricScope::Inclusive).accumulate(batch[i].id, v.inclusive[k]);
            }
          }
          if (derivedCount == 0) return;
          // This batch's leaf per (node, derived metric, scope), accumulated in profile order.
          std::vector<metrics::RealAccumulator> leaf(std::size_t{hi - lo} * derivedCount * 2);
          std::vector<std::uint8_t> used(leaf.size(), 0);
          for (std::size_t i = 0; i < batch.size(); ++i) {
            const ThreadValues& v = values[i];
            auto k = static_cast<std::size_t>(std::lower_bound(v.node.begin(), v.node.end(), lo) - v.node.begin());
            for (; k < v.size() && v.node[k] < hi; ++k) {
              if (v.metric[k] < rawCount) continue;
              const std::size_t at = ((v.node[k] - lo) * derivedCount + (v.metric[k] - rawCount)) * 2;
              if (v.exclusive[k]) leaf[at].accumulate(batch[i].id, fromBits(v.exclusive[k])), used[at] = 1;
              if (v.inclusive[k]) leaf[at + 1].accumulate(batch[i].id, fromBits(v.inclusive[k])), used[at + 1] = 1;
            }
          }
          for (std::size_t at = 0; at < leaf.size(); ++at)
            if (used[at]) pushPiece(derivedStacks[std::size_t{lo} * derivedCount * 2 + at], {0, batchIndex, std::move(leaf[at])});
        });
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const RegionValues& r = regionValues[i];
        for (std::size_t k = 0; k < r.region.size(); ++k) {
          const std::size_t at = std::size_t{r.region[k]} * kRegionSlots;
          regionAcc[at].accumulate(batch[i].id, r.count[k]);
          regionAcc[at + 1].accumulate(batch[i].id, r.exclusiveNs[k]);
          regionAcc[at + 2].accumulate(batch[i].id, r.inclusiveNs[k]);
        }
      }
      };
      pipeline.arena().execute([&] { tbb::parallel_invoke(writeByProfile, writeByNode, accumulate); });
      values.clear();
      writeSeconds += since(writeStart);
    });
    // Every process merges its batches' values by node into one sorted run, in parallel.
    storage::mergeShards(stagingDir, batchShards, shardBase + 1);

    // Region concurrency per process (host, pid). A process's threads may straddle ranks: the
    // rank holding its first profile reads the event logs of all of them.
    Packer mine;
    for (const auto& info : pipeline.localProfiles()) {
      mine.u64(info.id);
      mine.u64(info.input);
      mine.text(info.identity.hostname);
      mine.u64(info.identity.pid);
      mine.u64(info.hasRegionEvents);
    }
    std::map<std::pair<std::string, std::uint64_t>, std::vector<std::pair<std::uint32_t, std::size_t>>> processes;
    for (const auto& part : comm.allgather(mine.take())) {
      Unpacker u(part);
      while (!u.done()) {
        const auto id = static_cast<std::uint32_t>(u.u64());
        const auto input = static_cast<std::size_t>(u.u64());
        auto host = u.text();
        const auto pid = u.u64();
        if (u.u64()) processes[{std::move(host), pid}].emplace_back(id, input);
      }
    }
    const std::uint32_t myFirstProfile = pipeline.firstProfileId();
    const std::uint32_t myEndProfile = myFirstProfile + static_cast<std::uint32_t>(pipeline.localProfiles().size());
    for (auto& [process, members] : processes) {
      std::sort(members.begin(), members.end());
      const std::uint32_t first = members.front().first;
      if (first < myFirstProfile || first >= myEndProfile) continue;
      std::vector<ThreadProfile> threads;
      std::vector<const RegionProfile*> logs;
      std::vector<std::vector<std::uint32_t>> ids;
      for (const auto& [id, input] : members) threads.push_back(storage::readProfile(pipeline.inputs()[input].path));
      for (const auto& t : threads) {
        logs.push_back(&t.regions);
        ids.push_back(pipeline.regionIds(t.regions));
      }
      const auto c = regionConcurrency(ids, logs, pipeline.regions().size());
      for (std::size_t r = 1; r < c.size(); ++r) {
        if (c[r].maxParallelism == 0) continue;
        const std::size_t at = r * kRegionSlots;
        regionAcc[at + 3].accumulate(first, c[r].anyNs);
        regionAcc[at + 4].accumulate(first, c[r].allNs);
        regionAcc[at + 5].accumulate(first, c[r].areaNs);
        regionAcc[at + 6].accumulate(first, c[r].stragglerNs);
        regionAcc[at + 7].accumulate(first, c[r].maxParallelism);
      }
    }
  } catch (const PipelineError&) {
    throw;
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  pipeline.agree(errors);
  extraPhases.push_back({"  of which: write + accumulate", writeSeconds});
  const auto combineStart = now();

  // Partial summaries to the owners of their node ranges (reduce-scatter by node range).
  std::vector<std::vector<std::byte>> outgoing(static_cast<std::size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    Packer p;
    for (std::uint32_t n = ownerStart(nodeCount, r, comm.size()); n < ownerStart(nodeCount, r + 1, comm.size()); ++n) {
      for (std::uint16_t m = 0; m < rawCount; ++m) {
        for (auto scope : {storage::MetricScope::Exclusive, storage::MetricScope::Inclusive}) {
          const auto& a = summaries.at(n, m, scope);
          if (a.count() == 0) continue;
          p.u64((std::uint64_t{n} << 24) | (std::uint64_t{m} << 8) | static_cast<std::uint64_t>(scope));
          p.u64(1);
          p.text(metrics::encode(a));
        }
      }
      for (std::size_t d = 0; d < derivedCount; ++d) {
        for (std::size_t scope = 0; scope < 2; ++scope) {
          const auto& stack = derivedStacks[(std::size_t{n} * derivedCount + d) * 2 + scope];
          if (stack.empty()) continue;
          p.u64((std::uint64_t{n} << 24) | (std::uint64_t{rawCount + d} << 8) | scope);
          p.u64(stack.size());
          for (const auto& piece : stack) {
            p.u64(piece.level);
            p.u64(piece.index);
            p.text(metrics::encode(piece.acc));
          }
        }
      }
    }
    outgoing[static_cast<std::size_t>(r)] = p.take();
  }
  const auto incoming = comm.alltoall(outgoing);
  outgoing.clear();
  const std::uint32_t myFirst = ownerStart(nodeCount, comm.rank(), comm.size());
  const std::uint32_t myEnd = ownerStart(nodeCount, comm.rank() + 1, comm.size());
  errors.clear();
  try {
    // Parts arrive in rank order, which is batch order: folding derived pieces in that order
    // repeats exactly what one process would have done.
    std::map<std::uint64_t, metrics::IntAccumulator> owned;
    std::map<std::uint64_t, std::vector<Piece>> ownedDerived;
    for (const auto& part : incoming) {
      Unpacker u(part);
      while (!u.done()) {
        const auto key = u.u64();
        const auto pieces = u.u64();
        if (((key >> 8) & 0xFFFF) < rawCount) {
          auto acc = metrics::decodeIntAccumulator(u.text());
          auto [it, fresh] = owned.try_emplace(key, acc);
          if (!fresh) it->second.combine(acc);
          continue;
        }
        auto& stack = ownedDerived[key];
        for (std::uint64_t i = 0; i < pieces; ++i) {
          Piece piece;
          piece.level = static_cast<std::uint32_t>(u.u64());
          piece.index = u.u64();
          piece.acc = metrics::decodeRealAccumulator(u.text());
          pushPiece(stack, std::move(piece));
        }
      }
    }
    std::map<std::uint64_t, std::string> encoded;
    for (const auto& [key, acc] : owned) encoded[key] = metrics::encode(acc);
    for (const auto& [key, stack] : ownedDerived) encoded[key] = metrics::encode(foldPieces(stack));
    for (const auto& [key, bytes] : encoded) {
      const auto node = static_cast<std::uint32_t>(key >> 24);
      if (node < myFirst || node >= myEnd) throw std::logic_error("summary for a node outside this rank's range");
      mainShard->putSummary(node, static_cast<std::uint16_t>((key >> 8) & 0xFFFF),
                            static_cast<storage::MetricScope>(key & 0xFF), bytes);
    }
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }

  // Region summaries are small: gathered at the root.
  std::vector<std::byte> regionPart;
  {
    Packer p;
    for (std::size_t i = 0; i < regionAcc.size(); ++i) {
      if (regionAcc[i].count() == 0) continue;
      p.u64(i);
      p.text(metrics::encode(regionAcc[i]));
    }
    regionPart = p.take();
  }
  const auto regionParts = comm.gather(regionPart);

  // Profile identities for the metadata, gathered at the root in id order.
  std::vector<std::byte> identityPart;
  {
    Packer p;
    p.u64(pipeline.localProfiles().size());
    for (const auto& info : pipeline.localProfiles()) {
      p.u64(info.id);
      p.u64(info.identity.idTuple.size());
      for (const auto& e : info.identity.idTuple) {
        p.u64(static_cast<std::uint64_t>(e.kind));
        p.u64(e.value);
      }
      p.text(info.identity.hostname);
      p.u64(info.identity.pid);
      p.text(info.identity.executable);
      p.u64(info.identity.commandLine.size());
      for (const auto& a : info.identity.commandLine) p.text(a);
      // Sampling quality (docs/postprocessing.md, "Path quality").
      p.u64(info.stats.samples);
      p.u64(info.stats.unwindFailures);
      p.u64(info.stats.droppedSamples);
      p.u64(info.truncatedSamples);
      p.u64(info.stats.truncatedPaths);
    }
    identityPart = p.take();
  }
  const auto identityParts = comm.gather(identityPart);

  ProfSummary summary;
  if (root) {
    try {
      // Canonical CCT and regions.
      StringIds strings;  // texts in order of first use by the final CCT, then region names
      std::vector<storage::CctNode> nodes(nodeCount);
      for (std::uint32_t i = 0; i < nodeCount; ++i) {
        const auto& n = cct.node(i);
        const auto& text = pipeline.strings();
        nodes[i] = {n.parent, n.key.kind, strings.id(text.text(n.key.name)), strings.id(text.text(n.key.file)),
                    strings.id(text.text(n.key.module)), n.key.line};
      }
      mainShard->putCct(nodes);
      const auto& regions = pipeline.regions();
      std::vector<std::uint32_t> regionName(regions.size());
      for (std::size_t i = 0; i < regions.size(); ++i) regionName[i] = strings.id(regions[i].name);
      std::map<std::size_t, metrics::IntAccumulator> regionAll;
      for (const auto& part : regionParts) {
        Unpacker u(part);
        while (!u.done()) {
          const auto index = u.u64();
          auto acc = metrics::decodeIntAccumulator(u.text());
          auto [it, fresh] = regionAll.try_emplace(index, acc);
          if (!fresh) it->second.combine(acc);
        }
      }
      for (std::size_t i = 0; i < regions.size(); ++i) {
        mainShard->putRegion(static_cast<std::uint32_t>(i), {regions[i].parent, regionName[i], regions[i].dynamicId});
        constexpr auto E = storage::MetricScope::Exclusive;
        const std::pair<std::uint16_t, storage::MetricScope> slots[kRegionSlots] = {
            {kRegionVisits, E}, {kRegionTime, E}, {kRegionTime, storage::MetricScope::Inclusive},
            {2, E}, {3, E}, {4, E}, {5, E}, {6, E}};
        for (std::size_t k = 0; k < kRegionSlots; ++k) {
          auto it = regionAll.find(i * kRegionSlots + k);
          if (it != regionAll.end())
            mainShard->putRegionSummary(static_cast<std::uint32_t>(i), slots[k].first, slots[k].second,
                                        metrics::encode(it->second));
        }
      }

      // Metadata.
      storage::DatabaseMetadata meta;
      meta.title = options.title;
      meta.profiles.resize(profiles);
      meta.quality.resize(profiles);
      std::set<std::string> hosts;
      std::set<std::pair<std::string, std::uint64_t>> processes;
      bool first = true;
      for (const auto& part : identityParts) {
        Unpacker u(part);
        for (auto n = u.u64(); n > 0; --n) {
          const auto id = u.u64();
          IdTuple tuple(u.u64());
          for (auto& e : tuple) {
            e.kind = static_cast<IdKind>(u.u64());
            e.value = u.u64();
          }
          const std::string host = u.text();
          const auto pid = u.u64();
          const std::string exe = u.text();
          std::vector<std::string> cmd(u.u64());
          for (auto& a : cmd) a = u.text();
          storage::SamplingQuality q;
          q.samples = u.u64();
          q.unwindFailures = u.u64();
          q.droppedSamples = u.u64();
          q.truncatedSamples = u.u64();
          q.depthLimited = u.u64();
          meta.quality.at(id) = q;
          meta.profiles.at(id) = std::move(tuple);
          hosts.insert(host);
          processes.insert({host, pid});
          if (first && !exe.empty()) {
            meta.executable = exe;
            meta.commandLine = cmd;
            first = false;
          }
        }
      }
      meta.hostnames.assign(hosts.begin(), hosts.end());
      meta.processCount = processes.size();
      meta.threadCount = profiles;
      meta.nodeCount = nodeCount;
      meta.regionCount = static_cast<std::uint32_t>(regions.size());
      for (std::size_t m = 0; m < metricCount; ++m)
        meta.metrics.push_back({pipeline.metrics()[m], m < rawCount ? storage::ValueType::Count : storage::ValueType::Real});
      meta.strings = strings.take();
      for (const auto& k : pipeline.skipped()) meta.skipped.push_back({k.path, k.reason});
      meta.properties = {{"generator", "csp-prof-mpi"},
                         {"region.metrics",
                          "0=visits(E) 1=time-ns(E,I) 2=any-time-ns 3=all-time-ns 4=area-thread-ns "
                          "5=straggler-time-ns 6=max-parallelism (2-6: one value per process)"},
                         {"inputs", std::to_string(pipeline.inputs().size())}};
      mainShard->finish();
      valuesWritten += mainShard->valuesWritten();
      mainShard.reset();
      // Everyone's shards must be complete before ingestion.
      summary.metrics = meta.metrics.size();
      summary.quality = meta.qualityTotal();
      builder->writeMetadata(meta);
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  } else {
    try {
      mainShard->finish();
      valuesWritten += mainShard->valuesWritten();
      mainShard.reset();
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  pipeline.agree(errors);
  extraPhases.push_back({"combine + metadata", since(combineStart)});
  const auto publishStart = now();

  summary.valuesWritten = comm.sum(valuesWritten);
  errors.clear();
  if (root) {
    try {
      builder->ingestShards(shardTotal);
      builder->publish();
      summary.databaseBytes = directoryBytes(options.output);
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  pipeline.agree(errors);
  extraPhases.push_back({"ingest + publish", since(publishStart)});

  summary.inputs = pipeline.inputs().size();
  summary.profiles = profiles;
  summary.skipped = pipeline.skipped();
  summary.cctNodes = nodeCount;
  summary.metrics = metricCount;
  summary.regions = static_cast<std::uint32_t>(pipeline.regions().size());
  summary.phases = pipeline.phaseTimes();
  summary.phases.insert(summary.phases.end(), extraPhases.begin(), extraPhases.end());
  summary.attribution = pipeline.attributionStats();
  return summary;
}

std::vector<std::string> qualityWarnings(const storage::SamplingQuality& q) {
  std::vector<std::string> out;
  if (q.samples == 0) return out;
  const double share = storage::kQualityWarningShare;
  auto percent = [&](std::uint64_t n) { return 100.0 * static_cast<double>(n) / static_cast<double>(q.samples); };
  if (static_cast<double>(q.truncatedSamples) > share * static_cast<double>(q.samples))
    out.push_back(fmt::format(
        "{:.1f} % of the samples ({} of {}) have truncated call paths that do not reach the program's or a thread's "
        "entry{}; they are shown below '{}' (docs/postprocessing.md, \"Path quality\")",
        percent(q.truncatedSamples), q.truncatedSamples, q.samples,
        q.depthLimited ? fmt::format(", {} of them cut at the depth limit (csp-run --max-depth)", q.depthLimited) : "",
        kTruncatedPathsName));
  if (static_cast<double>(q.droppedSamples) > share * static_cast<double>(q.samples))
    out.push_back(fmt::format("{:.1f} % of the samples ({} of {}) were dropped by the measurement and are missing from the "
                              "profiles",
                              percent(q.droppedSamples), q.droppedSamples, q.samples));
  return out;
}

}  // namespace csp::reduce
