// Region summaries: visits and times from each thread's region tree, concurrency per process
// from the region event logs (docs/views.md, "Regions").
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "csp/metrics/encoding.hpp"
#include "prof_stages.hpp"
#include "region_logs.hpp"

namespace csp::reduce::prof {

namespace {

// One accumulator per region and stored (metric, scope), in table order.
struct Slot {
  std::uint16_t metric;
  storage::MetricScope scope;
};

const std::vector<Slot>& slots() {
  static const std::vector<Slot> all = [] {
    std::vector<Slot> out;
    const auto& table = storage::standardRegionMetrics();
    for (std::size_t id = 0; id < table.size(); ++id) {
      if (table[id].exclusive) out.push_back({static_cast<std::uint16_t>(id), storage::MetricScope::Exclusive});
      if (table[id].inclusive) out.push_back({static_cast<std::uint16_t>(id), storage::MetricScope::Inclusive});
    }
    return out;
  }();
  return all;
}

std::size_t slotOf(storage::RegionMetricId id, storage::MetricScope scope) {
  const auto metric = static_cast<std::uint16_t>(id);
  const auto& all = slots();
  for (std::size_t s = 0; s < all.size(); ++s)
    if (all[s].metric == metric && all[s].scope == scope) return s;
  throw std::logic_error("no such region metric slot");
}

// Concurrency of regions within one process, from its threads' enter/exit logs merged in time
// order. A thread is in a region while the region is on its stack (nested regions included).
struct RegionConcurrency {
  std::uint64_t anyNs = 0, allNs = 0, areaNs = 0, stragglerNs = 0, maxParallelism = 0;
};

// The area of `region` (threads x time) does not fit 64 bits. The times cannot: each is at most
// the span of the process's event times.
struct AreaOverflow {
  std::uint32_t region;
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
      std::uint64_t area = 0;
      if (__builtin_mul_overflow(inside[r], dt, &area) || __builtin_add_overflow(out[r].areaNs, area, &out[r].areaNs))
        throw AreaOverflow{r};
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

}  // namespace

RegionSummaries::RegionSummaries(std::size_t regionCount) : acc_(regionCount * slots().size()) {}

void RegionSummaries::accumulate(std::span<const ProfileInfo> batch, const std::vector<RegionValues>& values) {
  using storage::RegionMetricId;
  static const std::size_t visits = slotOf(RegionMetricId::Visits, storage::MetricScope::Exclusive);
  static const std::size_t timeE = slotOf(RegionMetricId::Time, storage::MetricScope::Exclusive);
  static const std::size_t timeI = slotOf(RegionMetricId::Time, storage::MetricScope::Inclusive);
  const std::size_t width = slots().size();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const RegionValues& r = values[i];
    for (std::size_t k = 0; k < r.region.size(); ++k) {
      const std::size_t at = std::size_t{r.region[k]} * width;
      acc_[at + visits].accumulate(batch[i].id, r.count[k]);
      acc_[at + timeE].accumulate(batch[i].id, r.exclusiveNs[k]);
      acc_[at + timeI].accumulate(batch[i].id, r.inclusiveNs[k]);
    }
  }
}

void RegionSummaries::addConcurrency(const Comm& comm, const Pipeline& pipeline, storage::ShardWriter& shard) {
  // Processes are (host, pid). A process's threads may straddle ranks: the rank holding its
  // first profile reads the event logs of all of them.
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
  const std::uint32_t myFirst = pipeline.firstProfileId();
  const std::uint32_t myEnd = myFirst + static_cast<std::uint32_t>(pipeline.localProfiles().size());
  const std::size_t width = slots().size();
  using storage::RegionMetricId;
  constexpr auto E = storage::MetricScope::Exclusive;
  const std::size_t anyTime = slotOf(RegionMetricId::AnyTime, E), allTime = slotOf(RegionMetricId::AllTime, E),
                    area = slotOf(RegionMetricId::Area, E), straggler = slotOf(RegionMetricId::StragglerTime, E),
                    maxPar = slotOf(RegionMetricId::MaxParallelism, E);
  // In order of first profile id: the region logs written below are keyed by it.
  std::map<std::uint32_t, decltype(processes)::value_type*> byFirst;
  for (auto& entry : processes) {
    std::sort(entry.second.begin(), entry.second.end());
    byFirst[entry.second.front().first] = &entry;
  }
  for (auto& [first, entry] : byFirst) {
    auto& [process, members] = *entry;
    if (first < myFirst || first >= myEnd) continue;
    std::vector<ThreadProfile> threads;
    std::vector<const RegionProfile*> logs;
    std::vector<std::vector<std::uint32_t>> ids;
    for (const auto& [id, input] : members) {
      const auto& in = pipeline.inputs()[input];
      threads.push_back(in.source->read(in.path));
    }
    for (const auto& t : threads) {
      logs.push_back(&t.regions);
      ids.push_back(pipeline.regionIds(t.regions));
    }
    std::vector<RegionConcurrency> c;
    try {
      c = regionConcurrency(ids, logs, pipeline.regions().size());
    } catch (const AreaOverflow& e) {
      const auto& region = pipeline.regions()[e.region];
      const auto& in = pipeline.inputs()[members.front().second];
      throw PipelineError(fmt::format(
          "{}: region '{}{}': the area of process {} pid {} ({} threads) exceeds 2^64 - 1 thread-ns, which region "
          "values cannot hold: its event times cannot be right",
          in.path.string(), region.name, region.dynamicId ? fmt::format("#{}", region.dynamicId) : std::string(),
          process.first, process.second, threads.size()));
    }
    std::vector<std::uint32_t> memberIds;
    for (const auto& m : members) memberIds.push_back(m.first);
    putRegionLogs(shard, process.first, process.second, memberIds, threads, ids);
    for (std::size_t r = 1; r < c.size(); ++r) {
      if (c[r].maxParallelism == 0) continue;
      const std::size_t at = r * width;
      acc_[at + anyTime].accumulate(first, c[r].anyNs);
      acc_[at + allTime].accumulate(first, c[r].allNs);
      acc_[at + area].accumulate(first, c[r].areaNs);
      acc_[at + straggler].accumulate(first, c[r].stragglerNs);
      acc_[at + maxPar].accumulate(first, c[r].maxParallelism);
    }
  }
}

std::vector<std::vector<std::byte>> RegionSummaries::gather(const Comm& comm) const {
  Packer p;
  for (std::size_t i = 0; i < acc_.size(); ++i) {
    if (acc_[i].count() == 0) continue;
    p.u64(i);
    p.text(metrics::encode(acc_[i]));
  }
  return comm.gather(p.take());
}

void RegionSummaries::write(const std::vector<std::vector<std::byte>>& parts, const std::vector<RegionTreeNode>& regions,
                            storage::StringIds& strings, storage::ShardWriter& shard) {
  const std::size_t width = slots().size();
  std::vector<std::uint32_t> regionName(regions.size());
  for (std::size_t i = 0; i < regions.size(); ++i) regionName[i] = strings.id(regions[i].name);
  std::map<std::size_t, metrics::IntAccumulator> all;
  for (const auto& part : parts) {
    Unpacker u(part);
    while (!u.done()) {
      const auto index = u.u64();
      auto acc = metrics::decodeIntAccumulator(u.text());
      auto [it, fresh] = all.try_emplace(index, acc);
      if (!fresh) it->second.combine(acc);
    }
  }
  for (std::size_t i = 0; i < regions.size(); ++i) {
    shard.putRegion(static_cast<std::uint32_t>(i), {regions[i].parent, regionName[i], regions[i].dynamicId});
    for (std::size_t k = 0; k < width; ++k) {
      auto it = all.find(i * width + k);
      if (it != all.end())
        shard.putRegionSummary(static_cast<std::uint32_t>(i), slots()[k].metric, slots()[k].scope, metrics::encode(it->second));
    }
  }
}

}  // namespace csp::reduce::prof
