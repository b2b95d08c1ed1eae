// Region summaries: visits and times from each thread's region tree, concurrency per process
// from the region event logs (docs/views.md, "Regions").
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "comm_events.hpp"
#include "csp/analysis/frames.hpp"
#include "csp/metrics/encoding.hpp"
#include "region_logs.hpp"
#include "stages.hpp"

namespace csp::reduce::dbsink {

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

// Concurrency of regions within one process, from the frames of its threads' enter/exit logs
// (docs/query.md, "Frames"): the frame engine of csp-query, so that these metrics and its
// answers cannot disagree (events of one nanosecond change the state at once: a hand-over is no
// overlap). A thread is in a region while the region is on its stack (nested regions included).
struct RegionConcurrency {
  std::uint64_t anyNs = 0, allNs = 0, areaNs = 0, stragglerNs = 0, maxParallelism = 0;
};

// The area of `region` (threads x time) does not fit 64 bits. The times cannot: each is at most
// the span of the process's event times.
struct AreaOverflow {
  std::uint32_t region;
};

// One thread's log in reduced region ids. Attributes are left out: they split frames but change
// none of these metrics.
class LogStream final : public analysis::EventStream {
 public:
  LogStream(const RegionProfile& log, const std::vector<std::uint32_t>& ids) : log_(log), ids_(ids) {}
  bool next(analysis::Event& out) override {
    if (at_ == log_.eventTimeNs.size()) return false;
    out.timeNs = log_.eventTimeNs[at_];
    out.region = ids_[log_.eventNode[at_]];
    out.enter = log_.eventIsEnter[at_];
    ++at_;
    return true;
  }

 private:
  const RegionProfile& log_;
  const std::vector<std::uint32_t>& ids_;
  std::size_t at_ = 0;
};

analysis::RegionTree frameTree(const std::vector<RegionTreeNode>& regions) {
  analysis::RegionTree tree;
  for (std::size_t i = 1; i < regions.size(); ++i) tree.add(regions[i].parent, regions[i].name, regions[i].dynamicId);
  return tree;
}

void account(RegionConcurrency& c, std::uint32_t region, std::uint64_t inside, std::uint64_t dt,
             std::uint64_t threads) {
  c.anyNs += dt;
  std::uint64_t area = 0;
  if (__builtin_mul_overflow(inside, dt, &area) || __builtin_add_overflow(c.areaNs, area, &c.areaNs))
    throw AreaOverflow{region};
  if (inside == threads) c.allNs += dt;
  if (inside == 1 && threads > 1) c.stragglerNs += dt;
  c.maxParallelism = std::max(c.maxParallelism, inside);
}

std::vector<RegionConcurrency> regionConcurrency(const analysis::RegionTree& tree,
                                                 const std::vector<std::vector<std::uint32_t>>& threadRegions,
                                                 const std::vector<const RegionProfile*>& threads) {
  std::vector<std::unique_ptr<analysis::EventStream>> streams;
  for (std::size_t th = 0; th < threads.size(); ++th)
    streams.push_back(std::make_unique<LogStream>(*threads[th], threadRegions[th]));
  analysis::FrameBuilder frames(tree, std::move(streams));
  std::vector<RegionConcurrency> out(tree.size());
  std::vector<std::uint64_t> inside(tree.size(), 0);
  std::vector<std::uint32_t> touched;
  analysis::Frame frame;
  while (frames.next(frame)) {
    for (const auto& state : *frame.states)
      for (std::uint32_t r = state.region; r != 0; r = tree.parent[r])
        if (inside[r]++ == 0) touched.push_back(r);
    for (const auto r : touched) {
      account(out[r], r, inside[r], frame.endNs - frame.beginNs, threads.size());
      inside[r] = 0;
    }
    touched.clear();
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
  pipeline.forEachLocalProfile([&](const ProfileInfo& info, const ProfileRecord& record, const InputProfile& input) {
    if (!info.hasRegionEvents) return;
    mine.u64(info.id);
    mine.text(input.path);
    mine.u64(pipeline.sourceIndex(input.source));
    mine.text(record.identity.hostname);
    mine.u64(record.identity.pid);
  });
  // Per process, each of its threads that logged region events: (profile id, input).
  std::map<std::pair<std::string, std::uint64_t>, std::vector<std::pair<std::uint32_t, InputProfile>>> processes;
  for (const auto& part : comm.allgather(mine.take())) {
    Unpacker u(part);
    while (!u.done()) {
      const auto id = static_cast<std::uint32_t>(u.u64());
      InputProfile input;
      input.path = u.text();
      input.source = pipeline.source(u.u64());
      auto host = u.text();
      const auto pid = u.u64();
      processes[{std::move(host), pid}].emplace_back(id, std::move(input));
    }
  }
  const std::uint32_t myFirst = pipeline.firstProfileId();
  const std::uint32_t myEnd = myFirst + pipeline.localProfileCount();
  const std::size_t width = slots().size();
  using storage::RegionMetricId;
  constexpr auto E = storage::MetricScope::Exclusive;
  const std::size_t anyTime = slotOf(RegionMetricId::AnyTime, E), allTime = slotOf(RegionMetricId::AllTime, E),
                    area = slotOf(RegionMetricId::Area, E), straggler = slotOf(RegionMetricId::StragglerTime, E),
                    maxPar = slotOf(RegionMetricId::MaxParallelism, E);
  // In order of first profile id: the region logs written below are keyed by it.
  std::map<std::uint32_t, decltype(processes)::value_type*> byFirst;
  const analysis::RegionTree tree = frameTree(pipeline.regions());
  for (auto& entry : processes) {
    std::sort(entry.second.begin(), entry.second.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });  // ids are distinct
    byFirst[entry.second.front().first] = &entry;
  }
  CommEventsCollector commEvents;
  for (auto& [first, entry] : byFirst) {
    auto& [process, members] = *entry;
    if (first < myFirst || first >= myEnd) continue;
    std::vector<ThreadProfile> threads;
    std::vector<const RegionProfile*> logs;
    std::vector<std::vector<std::uint32_t>> ids;
    for (const auto& [id, input] : members) threads.push_back(readInput(input));
    for (const auto& t : threads) {
      logs.push_back(&t.regions);
      ids.push_back(pipeline.regionIds(t.regions));
    }
    std::vector<RegionConcurrency> c;
    try {
      c = regionConcurrency(tree, ids, logs);
    } catch (const AreaOverflow& e) {
      const auto& region = pipeline.regions()[e.region];
      const auto& in = members.front().second;
      throw PipelineError(fmt::format(
          "{}: region '{}{}': the area of process {} pid {} ({} threads) exceeds 2^64 - 1 thread-ns, which region "
          "values cannot hold: its event times cannot be right",
          in.path, region.name, region.dynamicId ? fmt::format("#{}", region.dynamicId) : std::string(), process.first,
          process.second, threads.size()));
    }
    std::vector<std::uint32_t> memberIds;
    for (const auto& m : members) memberIds.push_back(m.first);
    putRegionLogs(shard, process.first, process.second, memberIds, threads, ids);
    commEvents.add(process.first, process.second, memberIds, threads, ids);
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
  commEvents.write(comm, shard);
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

void RegionSummaries::write(const std::vector<std::vector<std::byte>>& parts,
                            const std::vector<RegionTreeNode>& regions, storage::StringIds& strings,
                            storage::ShardWriter& shard) {
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
        shard.putRegionSummary(static_cast<std::uint32_t>(i), slots()[k].metric, slots()[k].scope,
                               metrics::encode(it->second));
    }
  }
}

}  // namespace csp::reduce::dbsink
