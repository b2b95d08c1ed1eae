#include "csp/analysis/distributed.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

namespace csp::analysis {

namespace {

using storage::TimeInterval;

// The clock of every process of `logs`, in its order.
std::vector<storage::ProcessClock> clocksOf(const storage::Database& db, const DatabaseLogs& logs) {
  if (!db.hasCommFamily())
    throw ClockError(fmt::format(
        "{}: the database has no clock data (format {}.{}, written before CSP stored clocks across processes); run "
        "csp-prof-mpi 1.7 or later on a measurement made with csp-run --region-log under MPI",
        db.directory().string(), db.formatVersion().major, db.formatVersion().minor));
  const auto all = db.processClocks();
  std::vector<storage::ProcessClock> out;
  for (const auto& p : logs.processes) {
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.process == p.process; });
    if (it == all.end() || !storage::hasClock(it->clock))
      throw ClockError(fmt::format(
          "{}: no clock data: the process was not measured with csp-run --region-log under Open MPI, or its clock "
          "exchange was lost; frames and what-ifs across processes need every process's clock against rank 0's "
          "(query the processes one by one without --global)",
          p.label));
    out.push_back(*it);
  }
  return out;
}

std::uint64_t threadNumber(const storage::ProcessClock& c, std::size_t processIndex, std::uint64_t thread) {
  const std::uint64_t base = c.rank >= 0 ? static_cast<std::uint64_t>(c.rank) : processIndex;
  return base * kGlobalThreadStride + thread;
}

// Aggregated events (Fig. 6.2): converted event intervals merged where they overlap, disjoint
// and sorted; an event takes place, for frames, at the start of its aggregate.
struct Aggregates {
  std::vector<TimeInterval> spans;
  std::uint64_t at(std::uint64_t lo) const {
    auto it = std::upper_bound(spans.begin(), spans.end(), lo,
                               [](std::uint64_t v, const TimeInterval& s) { return v < s.lo; });
    return it == spans.begin() ? lo : std::prev(it)->lo;
  }
};

class GlobalStream final : public EventStream {
 public:
  GlobalStream(std::unique_ptr<EventStream> local, const ClockSync& clock, const Aggregates& agg)
      : local_(std::move(local)), clock_(clock), agg_(agg) {}
  bool next(Event& out) override {
    if (!local_->next(out)) return false;
    out.timeNs = agg_.at(storage::toReference(clock_, out.timeNs)->lo);
    return true;
  }

 private:
  std::unique_ptr<EventStream> local_;
  ClockSync clock_;
  const Aggregates& agg_;
};

void aggregate(const DatabaseLogs& logs, const std::vector<storage::ProcessClock>& clocks, GlobalLogs& out,
               Aggregates& agg) {
  std::vector<TimeInterval> all;
  for (std::size_t p = 0; p < logs.processes.size(); ++p)
    for (auto& s : logs.processes[p].open()) {
      Event e;
      while (s->next(e)) {
        const TimeInterval in = *storage::toReference(clocks[p].clock, e.timeNs);
        out.widestNs = std::max(out.widestNs, in.width());
        all.push_back(in);
      }
    }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  for (const auto& in : all) {
    if (!agg.spans.empty() && in.lo <= agg.spans.back().hi)
      agg.spans.back().hi = std::max(agg.spans.back().hi, in.hi);
    else
      agg.spans.push_back(in);
  }
  out.aggregates = agg.spans.size();
  for (const auto& s : agg.spans) out.uncertainNs += s.width();
}

}  // namespace

GlobalLogs loadGlobalLogs(const storage::Database& db, const DatabaseLogs& logs) {
  const auto clocks = clocksOf(db, logs);
  GlobalLogs out;
  auto agg = std::make_shared<Aggregates>();
  aggregate(logs, clocks, out, *agg);
  std::size_t threads = 0;
  for (std::size_t p = 0; p < logs.processes.size(); ++p) {
    const auto& in = logs.processes[p];
    if (std::any_of(in.threadNumbers.begin(), in.threadNumbers.end(), [](auto t) { return t >= kGlobalThreadStride; }))
      throw ClockError(fmt::format("{}: a thread numbered {} or more cannot be numbered across processes", in.label,
                                   kGlobalThreadStride));
    for (auto t : in.threadNumbers) out.input.threadNumbers.push_back(threadNumber(clocks[p], p, t));
    out.input.events += in.events;
    threads += in.threadNumbers.size();
    out.guaranteed = out.guaranteed && storage::clockGuaranteed(clocks[p].clock);
  }
  out.input.label = fmt::format("all {} processes", logs.processes.size());
  const DatabaseLogs* lp = &logs;
  out.input.open = [lp, clocks, agg] {
    std::vector<std::unique_ptr<EventStream>> s;
    for (std::size_t p = 0; p < lp->processes.size(); ++p)
      for (auto& local : lp->processes[p].open())
        s.push_back(std::make_unique<GlobalStream>(std::move(local), clocks[p].clock, *agg));
    return s;
  };
  out.notes.push_back(fmt::format(
      "across processes: {} threads of {} processes on rank 0's clock; {} aggregated events, the widest event "
      "interval {} ns, {} ns of aggregated spans in all{}",
      threads, logs.processes.size(), out.aggregates, out.widestNs, out.uncertainNs,
      out.guaranteed ? ""
                     : "; some process lacks the second clock exchange (no MPI_Finalize): its bounds assume "
                       "a drift of at most 500 ppm and are not guaranteed"));
  return out;
}

TimeInterval waitBeginOf(const storage::ProcessClock& clock, const storage::CommEventRecord& e) {
  if (e.blocking()) return e.begin;
  TimeInterval w = storage::toReference(clock.clock, e.localWaitBeginNs).value_or(TimeInterval{e.begin.lo, e.end.hi});
  // Between the operation's start and its end, whose bounds consolidation may have narrowed.
  w.lo = std::max(w.lo, e.begin.lo);
  w.hi = std::min(w.hi, e.end.hi);
  if (w.lo > w.hi) w = {e.begin.lo, e.end.hi};
  return w;
}

namespace {

std::uint64_t pick(const TimeInterval& in, Bound b) {
  return b == Bound::Lower ? in.lo : b == Bound::Upper ? in.hi : in.lo + (in.hi - in.lo) / 2;
}

// One thread's vertices: its region events and its communication events, merged in local time.
void addThread(TimeWeightedDag& dag, std::vector<std::unique_ptr<EventStream>>::value_type& regions,
               const std::vector<storage::CommEventRecord>& comm, const storage::ProcessClock& clock, Bound bound) {
  const auto t = static_cast<std::uint32_t>(dag.threads.size());
  std::vector<std::pair<std::uint64_t, DagVertex>> v;
  Event e;
  while (regions->next(e)) {
    DagVertex x{e.enter ? DagVertex::Kind::Enter : DagVertex::Kind::Exit,
                pick(*storage::toReference(clock.clock, e.timeNs), bound), e.region, 0};
    v.emplace_back(e.timeNs, x);
  }
  for (const auto& c : comm) {
    const auto index = static_cast<std::uint32_t>(dag.comm.size());
    const bool blocking = c.blocking();
    dag.comm.push_back({c.kind, clock.rank, c.peer, c.tag, c.comm, c.sequence, t, 0, 0, c.op, blocking});
    v.emplace_back(c.localBeginNs, DagVertex{DagVertex::Kind::CommBegin, pick(c.begin, bound), 0, index});
    if (!blocking)
      v.emplace_back(c.localWaitBeginNs,
                     DagVertex{DagVertex::Kind::CommWait, pick(waitBeginOf(clock, c), bound), 0, index});
    v.emplace_back(c.localEndNs, DagVertex{DagVertex::Kind::CommEnd, pick(c.end, bound), 0, index});
  }
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto& seq = dag.threads.emplace_back();
  for (const auto& [local, x] : v) {
    if (x.kind == DagVertex::Kind::CommBegin) dag.comm[x.comm].beginVertex = static_cast<std::uint32_t>(seq.size());
    if (x.kind == DagVertex::Kind::CommEnd) dag.comm[x.comm].endVertex = static_cast<std::uint32_t>(seq.size());
    seq.push_back(x);
  }
}

}  // namespace

TimeWeightedDag loadDag(const storage::Database& db, const DatabaseLogs& logs, Bound bound) {
  const auto clocks = clocksOf(db, logs);
  TimeWeightedDag dag;
  dag.regionParent = logs.tree.parent;
  dag.regionName = logs.tree.name;
  for (std::size_t p = 0; p < logs.processes.size(); ++p) {
    const auto& in = logs.processes[p];
    const auto comm = db.commEvents(in.process);
    auto streams = in.open();
    for (std::size_t t = 0; t < streams.size(); ++t) {
      std::vector<storage::CommEventRecord> mine;
      for (const auto& c : comm)
        if (t < in.threadProfiles.size() && c.thread == in.threadProfiles[t]) mine.push_back(c);
      addThread(dag, streams[t], mine, clocks[p], bound);
    }
  }
  return dag;
}

WhatIfRange predictWhatIf(const storage::Database& db, const DatabaseLogs& logs, const std::string& region,
                          double reduction) {
  WhatIfRange r;
  r.middle = whatIf(loadDag(db, logs, Bound::Middle), region, reduction);
  const double lo = whatIf(loadDag(db, logs, Bound::Lower), region, reduction).speedup();
  const double hi = whatIf(loadDag(db, logs, Bound::Upper), region, reduction).speedup();
  r.speedupLo = std::min({lo, hi, r.middle.speedup()});
  r.speedupHi = std::max({lo, hi, r.middle.speedup()});
  return r;
}

}  // namespace csp::analysis

namespace csp::analysis {

namespace {

// How long `waiter` (begun at w) waited for `other` (begun at o) at most and at least: o - w.
Bounded lateness(const TimeInterval& w, const TimeInterval& o) {
  return {o.lo > w.hi ? o.lo - w.hi : 0, o.hi > w.lo ? o.hi - w.lo : 0};
}

// The same for a waiter that stopped waiting at `end`: min(o, end) - w.
Bounded latenessUntil(const TimeInterval& w, const TimeInterval& o, const TimeInterval& end) {
  return lateness(w, {std::min(o.lo, end.lo), std::min(o.hi, end.hi)});
}

void add(Bounded& sum, Bounded b) {
  sum.lo += b.lo;
  sum.hi += b.hi;
}

const storage::CommEventRecord& at(const std::vector<ProcessComm>& ps, const EventRef& r) {
  return ps[r.process].events[r.event];
}

// Each member's wait for the entries it waits for (collectiveWaits), by collective kind; the
// straggler scores of the collectives where every member waits for every other.
void addCollectiveWaits(const std::vector<ProcessComm>& ps, const std::vector<EventRef>& members,
                        std::vector<RankWaits>& out) {
  std::vector<CollectiveMember> m;
  m.reserve(members.size());
  for (const EventRef& r : members)
    m.push_back({at(ps, r).op, at(ps, r).peer, ps[r.process].clock.rank, at(ps, r).tag});
  const auto waits = collectiveWaits(m);
  for (std::size_t x = 0; x < members.size(); ++x) {
    const auto& mine = at(ps, members[x]);
    RankWaits& w = out[members[x].process];
    ++w.collectives;
    // The last entry waited for is at least the largest lower bound and at most the largest upper
    // bound; a member that waits for nobody waited 0.
    Bounded wait;
    if (!waits[x].empty()) {
      TimeInterval last{0, 0};
      for (std::size_t e : waits[x]) {
        last.lo = std::max(last.lo, at(ps, members[e]).begin.lo);
        last.hi = std::max(last.hi, at(ps, members[e]).begin.hi);
      }
      wait = lateness(mine.begin, last);
    }
    add(w.collectiveWait, wait);
    KindWaits& k = w.byKind[mine.op];
    add(k.wait, wait);
    ++k.count;
    if (!waitsForAll(mine.op, mine.peer)) continue;
    bool certain = true, possible = true;
    for (std::size_t e = 0; e < members.size(); ++e) {
      if (e == x) continue;
      const TimeInterval& other = at(ps, members[e]).begin;
      certain = certain && mine.begin.lo >= other.hi;
      possible = possible && mine.begin.hi >= other.lo;
    }
    w.stragglerCertain += certain ? 1 : 0;
    w.stragglerPossible += possible ? 1 : 0;
  }
}

}  // namespace

std::vector<RankWaits> mpiWaits(const storage::Database& db, const DatabaseLogs& logs) {
  const auto clocks = clocksOf(db, logs);
  std::vector<ProcessComm> ps;
  std::vector<RankWaits> out;
  for (std::size_t p = 0; p < logs.processes.size(); ++p) {
    ps.push_back({clocks[p], db.commEvents(logs.processes[p].process)});
    RankWaits w;
    w.rank = clocks[p].rank;
    w.label = logs.processes[p].label;
    out.push_back(w);
  }
  const CommPartners partners = matchPartners(ps);
  // A non-blocking operation waits from the start of the wait or test that completed it.
  for (const auto& [s, r] : partners.messages) {
    const auto& send = at(ps, s);
    const auto& recv = at(ps, r);
    add(out[r.process].lateSender, latenessUntil(waitBeginOf(ps[r.process].clock, recv), send.begin, recv.end));
    add(out[s.process].lateReceiver, lateness(waitBeginOf(ps[s.process].clock, send), recv.begin));
  }
  for (const auto& members : partners.collectives) addCollectiveWaits(ps, members, out);
  return out;
}

}  // namespace csp::analysis
