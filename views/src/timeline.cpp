// The region timeline of a time window (Session::timeline, docs/web.md): per process one lane per
// thread, the region visits of the window from the stored event logs. A window is read from the
// log block that holds its start (storage's windowed cursor), so zooming into a long run reads a
// few blocks, not the log. The regions open at the window's start follow from the last event
// before it: a region tree node is its path, so the innermost open region names all the others.
#include <fmt/format.h>

#include <algorithm>

#include "csp/analysis/database_source.hpp"
#include "csp/views/session.hpp"

namespace csp::views {

namespace {

struct Open {
  std::uint32_t region = 0;
  std::uint64_t beginNs = 0;
  bool before = false;  // began before the window (its begin is the window's start)
};

// Collects one lane's intervals, merging visits shorter than the resolution per depth.
class LaneBuilder {
 public:
  LaneBuilder(TimelineLane& lane, std::uint64_t resolution) : lane_(lane), resolution_(resolution) {}

  void add(TimelineInterval iv) {
    if (pending_.size() <= iv.depth) pending_.resize(iv.depth + 1);
    auto& p = pending_[iv.depth];
    const bool shortVisit = iv.endNs - iv.beginNs < resolution_ && !iv.openBefore && !iv.openAfter;
    if (!shortVisit) {
      flush(iv.depth);
      lane_.intervals.push_back(iv);
      return;
    }
    if (p && iv.beginNs <= p->endNs + resolution_) {
      p->endNs = std::max(p->endNs, iv.endNs);
      p->visits += iv.visits;
      if (p->region != iv.region) p->region = 0;
      return;
    }
    flush(iv.depth);
    p = iv;
  }

  void finish() {
    for (std::size_t d = 0; d < pending_.size(); ++d) flush(d);
    std::stable_sort(lane_.intervals.begin(), lane_.intervals.end(), [](const auto& a, const auto& b) {
      return a.beginNs < b.beginNs || (a.beginNs == b.beginNs && a.depth < b.depth);
    });
  }

 private:
  void flush(std::size_t depth) {
    if (depth < pending_.size() && pending_[depth]) {
      lane_.intervals.push_back(*pending_[depth]);
      pending_[depth].reset();
    }
  }
  TimelineLane& lane_;
  std::uint64_t resolution_;
  std::vector<std::optional<TimelineInterval>> pending_;
};

// The open regions after `last` (the last event before the window): the path to the region it
// entered, or to the parent of the one it left.
std::vector<Open> openAfter(const analysis::RegionTree& tree, const storage::RegionLogEvent& last, std::uint64_t from) {
  std::vector<Open> path;
  std::uint32_t r = last.region < tree.size() ? last.region : 0;
  if (!last.enter && r != 0) r = tree.parent[r];
  for (; r != 0 && r < tree.size(); r = tree.parent[r]) path.push_back({r, from, true});
  std::reverse(path.begin(), path.end());
  return path;
}

// One thread's visits in [from, to] (absolute ns); `origin` makes them relative.
void readLane(const storage::Database& db, const analysis::RegionTree& tree, storage::ProfileId process,
              std::uint64_t origin, std::uint64_t from, std::uint64_t to, std::uint64_t resolution,
              TimelineLane& lane) {
  LaneBuilder out(lane, resolution);
  auto emit = [&](const Open& o, std::size_t depth, std::uint64_t end, bool after) {
    out.add({o.beginNs - origin, end - origin, o.region, static_cast<std::uint32_t>(depth), 1, o.before, after});
  };
  std::vector<Open> stack;
  std::optional<storage::RegionLogEvent> last;  // the last event before the window
  auto cursor = db.regionLog(process, lane.thread, from);
  storage::RegionLogEvent e;
  bool started = false;
  while (cursor->next(e)) {
    ++lane.eventsRead;
    if (e.timeNs < from) {
      last = e;
      continue;
    }
    if (!started) {
      started = true;
      if (last) stack = openAfter(tree, *last, from);
    }
    if (e.timeNs > to) break;
    if (e.enter) {
      stack.push_back({e.region, e.timeNs, false});
      continue;
    }
    // An exit closes its region and whatever was left open inside it; an exit of a region
    // that is not open is ignored (csp-query counts it as mismatched).
    const auto it = std::find_if(stack.rbegin(), stack.rend(), [&](const Open& o) { return o.region == e.region; });
    if (it == stack.rend()) continue;
    const auto keep = stack.size() - static_cast<std::size_t>(it - stack.rbegin()) - 1;
    while (stack.size() > keep) {
      emit(stack.back(), stack.size() - 1, e.timeNs, false);
      stack.pop_back();
    }
  }
  if (!started && last) stack = openAfter(tree, *last, from);
  while (!stack.empty()) {
    emit(stack.back(), stack.size() - 1, to, true);
    stack.pop_back();
  }
  out.finish();
}

// First and last event time of a thread (two block reads).
std::pair<std::uint64_t, std::uint64_t> span(const storage::Database& db, storage::ProfileId process,
                                             storage::ProfileId thread) {
  storage::RegionLogEvent e;
  std::uint64_t first = UINT64_MAX, last = 0;
  if (db.regionLog(process, thread)->next(e)) first = e.timeNs;
  for (auto c = db.regionLog(process, thread, UINT64_MAX); c->next(e);) last = e.timeNs;
  return {first, last};
}

void addFrames(const QueryAnswer& answer, std::size_t index, std::uint64_t from, std::uint64_t to, TimelineProcess& p) {
  if (index >= answer.results.size()) return;
  for (const auto& b : answer.results[index].bindings) {
    p.framesInAll += b.frameCount;
    for (const auto& f : b.frames)
      if (f.endNs >= from && f.beginNs <= to) p.frames.push_back({f.beginNs, f.endNs, b.label});
  }
}

}  // namespace

Timeline Session::timeline(const TimelineRequest& request) const {
  const auto& db = database();
  const auto logs = analysis::loadLogs(db);
  if (logs.processes.empty()) throw ViewError(analysis::noLogsExplanation(db, logs));
  const auto& meta = db.metadata();
  Timeline t;
  t.regions = logs.tree.name;
  std::optional<QueryAnswer> frames;
  if (request.query) {
    if (!request.query->query || request.query->query->kind != analysis::Query::Kind::Frames)
      throw ViewError("the timeline highlights the frames of a query without measure (csp-query's frames)");
    frames = query(*request.query);
    t.query = request.query->query->text;
    t.warnings = frames->warnings;
  }
  const auto processes = db.regionLogProcesses();
  struct Span {
    std::uint64_t origin = UINT64_MAX, end = 0;
  };
  std::vector<Span> spans(processes.size());
  std::uint64_t longest = 0;
  for (std::size_t i = 0; i < processes.size() && i < request.maxProcesses; ++i) {
    for (const auto& th : processes[i].threads) {
      const auto [first, last] = span(db, processes[i].process, th.profile);
      spans[i].origin = std::min(spans[i].origin, first);
      spans[i].end = std::max(spans[i].end, last);
    }
    if (spans[i].origin <= spans[i].end) longest = std::max(longest, spans[i].end - spans[i].origin);
  }
  t.fromNs = request.fromNs;
  t.toNs = std::max(request.toNs.value_or(longest), t.fromNs + 1);
  t.resolutionNs = (t.toNs - t.fromNs) / std::max<std::size_t>(request.pixels, 1);
  if (processes.size() > request.maxProcesses)
    t.warnings.push_back(
        fmt::format("warning: the first {} of {} processes shown", request.maxProcesses, processes.size()));
  for (std::size_t i = 0; i < processes.size() && i < request.maxProcesses; ++i) {
    TimelineProcess p;
    p.process = processes[i].process;
    p.label = logs.processes[i].label;
    const auto origin = spans[i].origin == UINT64_MAX ? 0 : spans[i].origin;
    p.durationNs = spans[i].end > origin ? spans[i].end - origin : 0;
    for (const auto& th : processes[i].threads) {
      TimelineLane lane;
      lane.thread = th.profile;
      if (th.profile < meta.profiles.size()) lane.who = formatIdTuple(meta.profiles[th.profile]);
      if (th.profile < meta.threadClasses.size())
        lane.threadClass = storage::toString(meta.threadClasses[th.profile].threadClass);
      readLane(db, logs.tree, p.process, origin, origin + t.fromNs, origin + t.toNs, t.resolutionNs, lane);
      p.lanes.push_back(std::move(lane));
    }
    if (frames) addFrames(*frames, i, t.fromNs, t.toNs, p);
    t.processes.push_back(std::move(p));
  }
  return t;
}

}  // namespace csp::views
