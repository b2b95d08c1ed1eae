#include "csp/analysis/causal.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

namespace csp::analysis {

namespace {

using storage::CommEventRecord;

using storage::TimeInterval;

constexpr TimeInterval kUnknown{0, std::numeric_limits<std::uint64_t>::max()};

void convert(ProcessComm& p) {
  for (auto& e : p.events) {
    e.begin = storage::toReference(p.clock.clock, e.localBeginNs).value_or(kUnknown);
    e.end = storage::toReference(p.clock.clock, e.localEndNs).value_or(kUnknown);
  }
}

using Ref = EventRef;

// `later` happens after `earlier` (their true times): later.lo >= earlier.lo, earlier.hi <=
// later.hi. Returns the number of bounds narrowed, or -1 for a contradiction (the bounds cannot
// both hold with the order: a clock assumption is broken), which narrows nothing.
int order(TimeInterval& earlier, TimeInterval& later) {
  if (earlier.lo > later.hi) return -1;
  int n = 0;
  if (later.lo < earlier.lo) later.lo = earlier.lo, ++n;
  if (earlier.hi > later.hi) earlier.hi = later.hi, ++n;
  return n;
}

using Partners = CommPartners;

CommEventRecord& at(std::vector<ProcessComm>& ps, Ref r) { return ps[r.process].events[r.event]; }

// One pass of every causal order; the number of bounds narrowed.
struct PassCounts {
  std::vector<std::uint64_t> narrowed, conflicts;  // per process
  std::uint64_t total = 0;
};

std::uint64_t enforce(std::vector<ProcessComm>& ps, const Partners& partners, PassCounts& c) {
  c.total = 0;
  auto count = [&](Ref r, int n) {
    if (n < 0) {
      ++c.conflicts[r.process];
      return;
    }
    c.narrowed[r.process] += static_cast<std::uint64_t>(n);
    c.total += static_cast<std::uint64_t>(n);
  };
  for (const auto& [s, r] : partners.messages) count(r, order(at(ps, s).begin, at(ps, r).end));
  for (const auto& [entry, exit] : partners.collectiveOrders) count(exit, order(at(ps, entry).begin, at(ps, exit).end));
  for (std::size_t p = 0; p < ps.size(); ++p) {
    auto& ev = ps[p].events;
    for (std::size_t i = 0; i < ev.size(); ++i) {
      count({p, i}, order(ev[i].begin, ev[i].end));
      if (i + 1 >= ev.size() || ev[i + 1].thread != ev[i].thread) continue;
      // Non-blocking operations overlap the events around them: only what the local clock orders.
      if (ev[i].localEndNs <= ev[i + 1].localBeginNs) count({p, i}, order(ev[i].end, ev[i + 1].begin));
      if (ev[i].localEndNs <= ev[i + 1].localEndNs) count({p, i}, order(ev[i].end, ev[i + 1].end));
    }
  }
  return c.total;
}

}  // namespace

bool waitsForAll(CollectiveOp op, std::int32_t root) {
  switch (op) {
    case CollectiveOp::Barrier:
    case CollectiveOp::Allreduce:
    case CollectiveOp::Allgather:
    case CollectiveOp::Allgatherv:
    case CollectiveOp::Alltoall:
    case CollectiveOp::Alltoallv:
    case CollectiveOp::ReduceScatter:
    case CollectiveOp::ReduceScatterBlock:
      return true;
    case CollectiveOp::Unknown:
      return root == -1;
    default:
      return false;
  }
}

std::vector<std::vector<std::size_t>> collectiveWaits(const std::vector<CollectiveMember>& members) {
  std::vector<std::vector<std::size_t>> out(members.size());
  for (std::size_t x = 0; x < members.size(); ++x) {
    const CollectiveMember& m = members[x];
    const bool isRoot = m.root >= 0 && m.rank == m.root;
    for (std::size_t e = 0; e < members.size(); ++e) {
      if (e == x) continue;
      const CollectiveMember& o = members[e];
      bool waits = false;
      switch (m.op) {
        case CollectiveOp::Bcast:
        case CollectiveOp::Scatter:
        case CollectiveOp::Scatterv:
          waits = !isRoot && o.rank == m.root;
          break;
        case CollectiveOp::Reduce:
        case CollectiveOp::Gather:
        case CollectiveOp::Gatherv:
          waits = isRoot;
          break;
        case CollectiveOp::Scan:
        case CollectiveOp::Exscan:
          waits = o.commRank < m.commRank;
          break;
        default:
          waits = waitsForAll(m.op, m.root);
      }
      if (waits) out[x].push_back(e);
    }
  }
  return out;
}

CommPartners matchPartners(const std::vector<ProcessComm>& ps) {
  using MessageKey = std::tuple<std::int64_t, std::int64_t, std::int32_t, std::uint64_t, std::uint64_t>;
  std::map<MessageKey, Ref> sends, recvs;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<Ref>> colls;
  for (std::size_t p = 0; p < ps.size(); ++p) {
    const std::int64_t rank = ps[p].clock.rank;
    for (std::size_t i = 0; i < ps[p].events.size(); ++i) {
      const CommEventRecord& e = ps[p].events[i];
      if (e.kind == CommKind::Send) sends[{rank, e.peer, e.tag, e.comm, e.sequence}] = {p, i};
      if (e.kind == CommKind::Recv) recvs[{e.peer, rank, e.tag, e.comm, e.sequence}] = {p, i};
      if (e.kind == CommKind::Collective) colls[{e.comm, e.sequence}].push_back({p, i});
    }
  }
  CommPartners out;
  for (const auto& [key, s] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      ++out.unmatchedMessages;
      continue;
    }
    out.messages.emplace_back(s, it->second);
    recvs.erase(it);
  }
  out.unmatchedMessages += recvs.size();
  for (auto& [key, members] : colls) {
    if (members.size() < 2) continue;
    std::vector<CollectiveMember> m;
    for (const Ref& r : members) {
      const CommEventRecord& e = ps[r.process].events[r.event];
      m.push_back({e.op, e.peer, ps[r.process].clock.rank, e.tag});
    }
    const auto waits = collectiveWaits(m);
    for (std::size_t x = 0; x < members.size(); ++x)
      for (std::size_t e : waits[x]) out.collectiveOrders.emplace_back(members[e], members[x]);
    out.collectives.push_back(std::move(members));
  }
  return out;
}

ConsolidationStats consolidate(std::vector<ProcessComm>& processes) {
  ConsolidationStats stats;
  for (auto& p : processes) convert(p);
  const Partners partners = matchPartners(processes);
  stats.matchedMessages = partners.messages.size();
  stats.unmatchedMessages = partners.unmatchedMessages;
  stats.collectives = partners.collectives.size();
  PassCounts c{std::vector<std::uint64_t>(processes.size(), 0), {}, 0};
  // Narrowing propagates along chains of messages; a few passes reach what matters (each pass
  // only narrows, so stopping early is safe). Conflicts are those of the last pass.
  for (int pass = 0; pass < 8; ++pass) {
    c.conflicts.assign(processes.size(), 0);
    if (enforce(processes, partners, c) == 0) break;
  }
  for (std::size_t p = 0; p < processes.size(); ++p) {
    processes[p].clock.tightened = c.narrowed[p];
    processes[p].clock.conflicts = c.conflicts[p];
    stats.tightened += c.narrowed[p];
    stats.conflicts += c.conflicts[p];
  }
  return stats;
}

}  // namespace csp::analysis

namespace csp::analysis {

namespace {

struct VertexRef {
  std::uint32_t thread = 0, index = 0;
};

// Causal predecessors of the ends of receives and collectives: the vertices their end waits for
// besides its own thread's previous one.
std::vector<std::vector<VertexRef>> causalPredecessors(const TimeWeightedDag& dag) {
  using MessageKey = std::tuple<std::int64_t, std::int64_t, std::int32_t, std::uint64_t, std::uint64_t>;
  std::map<MessageKey, std::uint32_t> sends;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::uint32_t>> colls;
  for (std::uint32_t i = 0; i < dag.comm.size(); ++i) {
    const DagComm& c = dag.comm[i];
    if (c.kind == CommKind::Send) sends[{c.rank, c.peer, c.tag, c.communicator, c.sequence}] = i;
    if (c.kind == CommKind::Collective) colls[{c.communicator, c.sequence}].push_back(i);
  }
  std::vector<std::vector<VertexRef>> preds(dag.comm.size());
  for (std::uint32_t i = 0; i < dag.comm.size(); ++i) {
    const DagComm& c = dag.comm[i];
    if (c.kind != CommKind::Recv) continue;
    auto it = sends.find({c.peer, c.rank, c.tag, c.communicator, c.sequence});
    if (it != sends.end()) preds[i].push_back({dag.comm[it->second].thread, dag.comm[it->second].beginVertex});
  }
  for (const auto& [key, members] : colls) {
    std::vector<CollectiveMember> m;
    for (auto i : members) m.push_back({dag.comm[i].op, dag.comm[i].peer, dag.comm[i].rank, dag.comm[i].tag});
    const auto waits = collectiveWaits(m);
    for (std::size_t x = 0; x < members.size(); ++x)
      for (std::size_t e : waits[x])
        preds[members[x]].push_back({dag.comm[members[e]].thread, dag.comm[members[e]].beginVertex});
  }
  return preds;
}

class Replay {
 public:
  Replay(const TimeWeightedDag& dag, const std::string& region, double reduction)
      : dag_(dag), reduction_(reduction), preds_(causalPredecessors(dag)) {
    target_.assign(dag.regionName.size(), 0);
    for (std::size_t r = 0; r < target_.size(); ++r) target_[r] = dag.regionName[r] == region;
    newT_.resize(dag.threads.size());
    for (std::size_t t = 0; t < dag.threads.size(); ++t) newT_[t].resize(dag.threads[t].size());
    cursor_.assign(dag.threads.size(), 0);
    inside_.assign(dag.threads.size(), 0);
  }

  // Every vertex once its predecessors are done; threads advance as far as they can in turn.
  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (std::uint32_t t = 0; t < dag_.threads.size(); ++t)
        while (cursor_[t] < dag_.threads[t].size() && ready(t, cursor_[t])) {
          step(t, cursor_[t]++);
          progress = true;
        }
    }
    for (std::size_t t = 0; t < cursor_.size(); ++t)
      if (cursor_[t] != dag_.threads[t].size())
        throw std::invalid_argument("the time-weighted DAG has a causal cycle: messages or collectives do not match");
  }

  std::uint64_t endNs() const {
    std::uint64_t end = 0;
    for (const auto& t : newT_)
      if (!t.empty()) end = std::max(end, t.back());
    return end;
  }
  std::uint64_t regionNs() const { return regionNs_; }

 private:
  const std::vector<VertexRef>* predsOf(const DagVertex& v) const {
    if (v.kind != DagVertex::Kind::CommEnd || preds_[v.comm].empty()) return nullptr;
    return &preds_[v.comm];
  }

  // The edge from `u` on is time inside an MPI call, which a faster region does not shorten.
  bool insideCall(const DagVertex& u) const {
    return u.kind == DagVertex::Kind::CommWait || (u.kind == DagVertex::Kind::CommBegin && dag_.comm[u.comm].blocking);
  }

  bool ready(std::uint32_t t, std::uint32_t i) const {
    const auto* preds = predsOf(dag_.threads[t][i]);
    if (preds == nullptr) return true;
    for (const auto& p : *preds)
      if (cursor_[p.thread] <= p.index) return false;
    return true;
  }

  void step(std::uint32_t t, std::uint32_t i) {
    const auto& seq = dag_.threads[t];
    const DagVertex& v = seq[i];
    if (i == 0) {
      newT_[t][i] = v.timeNs;
    } else {
      const DagVertex& u = seq[i - 1];
      const std::uint64_t gap = v.timeNs > u.timeNs ? v.timeNs - u.timeNs : 0;
      const std::uint64_t after = newT_[t][i - 1];
      if (const auto* preds = predsOf(v)) {
        std::uint64_t waitedFor = 0, waitedForNew = 0;
        for (const auto& p : *preds) {
          waitedFor = std::max(waitedFor, dag_.threads[p.thread][p.index].timeNs);
          waitedForNew = std::max(waitedForNew, newT_[p.thread][p.index]);
        }
        const std::uint64_t rest = std::min(gap, v.timeNs > waitedFor ? v.timeNs - waitedFor : 0);
        newT_[t][i] = std::max(after + rest, waitedForNew + rest);
      } else if (inside_[t] > 0 && !insideCall(u)) {
        const auto cut = static_cast<std::uint64_t>(static_cast<double>(gap) * reduction_);
        regionNs_ += gap;
        newT_[t][i] = after + gap - cut;
      } else {
        newT_[t][i] = after + gap;
      }
    }
    if (v.kind == DagVertex::Kind::Enter && v.region < target_.size() && target_[v.region]) ++inside_[t];
    if (v.kind == DagVertex::Kind::Exit && v.region < target_.size() && target_[v.region] && inside_[t] > 0)
      --inside_[t];
  }

  const TimeWeightedDag& dag_;
  double reduction_;
  std::vector<std::vector<VertexRef>> preds_;
  std::vector<char> target_;
  std::vector<std::vector<std::uint64_t>> newT_;
  std::vector<std::uint32_t> cursor_;
  std::vector<int> inside_;
  std::uint64_t regionNs_ = 0;
};

}  // namespace

WhatIf whatIf(const TimeWeightedDag& dag, const std::string& region, double reduction) {
  WhatIf w;
  w.region = region;
  w.reduction = reduction;
  std::uint64_t start = std::numeric_limits<std::uint64_t>::max(), end = 0;
  for (const auto& t : dag.threads)
    if (!t.empty()) start = std::min(start, t.front().timeNs), end = std::max(end, t.back().timeNs);
  if (end < start) return w;
  Replay replay(dag, region, reduction);
  replay.run();
  w.originalNs = end - start;
  w.predictedNs = replay.endNs() - start;
  w.regionNs = replay.regionNs();
  return w;
}

}  // namespace csp::analysis
