#include "comm_events.hpp"

#include <algorithm>

namespace csp::reduce {

namespace {

// Threads written before MPI_Finalize carry a weaker clock record than the main thread: the
// process's clock is the most complete one among its threads.
int strength(ClockState s) {
  switch (s) {
    case ClockState::Measured:
    case ClockState::Reference:
    case ClockState::SameClock:
      return 3;
    case ClockState::InitOnly:
      return 2;
    case ClockState::None:
      break;
  }
  return 0;
}

std::int64_t rankOf(const ThreadProfile& t) {
  for (const auto& e : t.identity.idTuple)
    if (e.kind == IdKind::Rank) return static_cast<std::int64_t>(e.value);
  return -1;
}

std::uint64_t zig(std::int64_t v) { return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63); }
std::int64_t unzig(std::uint64_t z) { return static_cast<std::int64_t>(z >> 1) ^ -static_cast<std::int64_t>(z & 1); }

void pack(Packer& out, const analysis::ProcessComm& p) {
  const auto& c = p.clock;
  out.u64(c.process);
  out.text(c.hostname);
  out.u64(c.pid);
  out.u64(zig(c.rank));
  const ClockSync& k = c.clock;
  out.u8(static_cast<std::uint8_t>(k.state));
  for (std::uint64_t v : {std::uint64_t{k.referenceRank}, k.initLocalNs, k.initRefLoNs, k.initRefHiNs, k.finalLocalNs,
                          k.finalRefLoNs, k.finalRefHiNs, std::uint64_t{k.rounds}, k.costNs})
    out.u64(v);
  out.u64(p.events.size());
  for (const auto& e : p.events) {
    out.u64(e.thread);
    out.u8(static_cast<std::uint8_t>(e.kind));
    out.u64(e.localBeginNs);
    out.u64(e.localEndNs);
    out.u64(zig(e.peer));
    out.u64(zig(e.tag));
    out.u64(e.comm);
    out.u64(e.sequence);
    out.u64(e.region);
    out.u64(e.localWaitBeginNs);
    out.u8(static_cast<std::uint8_t>(e.op));
  }
}

analysis::ProcessComm unpack(Unpacker& in) {
  analysis::ProcessComm p;
  auto& c = p.clock;
  c.process = static_cast<std::uint32_t>(in.u64());
  c.hostname = in.text();
  c.pid = in.u64();
  c.rank = unzig(in.u64());
  ClockSync& k = c.clock;
  k.state = static_cast<ClockState>(in.u8());
  k.referenceRank = static_cast<std::uint32_t>(in.u64());
  for (std::uint64_t* v :
       {&k.initLocalNs, &k.initRefLoNs, &k.initRefHiNs, &k.finalLocalNs, &k.finalRefLoNs, &k.finalRefHiNs})
    *v = in.u64();
  k.rounds = static_cast<std::uint32_t>(in.u64());
  k.costNs = in.u64();
  const std::uint64_t n = in.u64();
  for (std::uint64_t i = 0; i < n; ++i) {
    storage::CommEventRecord e;
    e.thread = static_cast<std::uint32_t>(in.u64());
    e.kind = static_cast<CommKind>(in.u8());
    e.localBeginNs = in.u64();
    e.localEndNs = in.u64();
    e.peer = static_cast<std::int32_t>(unzig(in.u64()));
    e.tag = static_cast<std::int32_t>(unzig(in.u64()));
    e.comm = in.u64();
    e.sequence = in.u64();
    e.region = static_cast<std::uint32_t>(in.u64());
    e.localWaitBeginNs = in.u64();
    e.op = static_cast<CollectiveOp>(in.u8());
    p.events.push_back(e);
  }
  return p;
}

}  // namespace

void CommEventsCollector::add(const std::string& hostname, std::uint64_t pid,
                              const std::vector<std::uint32_t>& profiles, const std::vector<ThreadProfile>& threads,
                              const std::vector<std::vector<std::uint32_t>>& regionIds) {
  analysis::ProcessComm p;
  p.clock.process = profiles.front();
  p.clock.hostname = hostname;
  p.clock.pid = pid;
  bool any = false;
  for (std::size_t i = 0; i < threads.size(); ++i) {
    const ThreadProfile& t = threads[i];
    if (strength(t.clock.state) > strength(p.clock.clock.state)) p.clock.clock = t.clock;
    if (p.clock.rank < 0) p.clock.rank = rankOf(t);
    const CommLog& m = t.commLog;
    any = any || m.size() > 0;
    for (std::size_t k = 0; k < m.size(); ++k) {
      storage::CommEventRecord e;
      e.thread = profiles[i];
      e.kind = static_cast<CommKind>(m.kind[k]);
      e.localBeginNs = m.beginNs[k];
      e.localEndNs = m.endNs[k];
      e.peer = m.peer[k];
      e.tag = m.tag[k];
      e.comm = m.comm[k];
      e.sequence = m.sequence[k];
      e.region = m.region[k] < regionIds[i].size() ? regionIds[i][m.region[k]] : 0;
      if (k < m.waitBeginNs.size() && m.waitBeginNs[k] > e.localBeginNs) e.localWaitBeginNs = m.waitBeginNs[k];
      e.op = static_cast<CollectiveOp>(k < m.op.size() ? m.op[k] : 0);
      p.events.push_back(e);
    }
  }
  if (any || p.clock.clock.state != ClockState::None) mine_.push_back(std::move(p));
}

void CommEventsCollector::write(const Comm& comm, storage::ShardWriter& shard) {
  Packer out;
  for (const auto& p : mine_) pack(out, p);
  std::vector<analysis::ProcessComm> all;
  std::vector<bool> isMine;
  const auto parts = comm.allgather(out.take());
  for (std::size_t r = 0; r < parts.size(); ++r) {
    Unpacker in(std::string_view(reinterpret_cast<const char*>(parts[r].data()), parts[r].size()),
                "communication events");
    while (!in.done()) {
      all.push_back(unpack(in));
      isMine.push_back(static_cast<int>(r) == comm.rank());
    }
  }
  if (all.empty()) return;
  // The same order on every rank whatever the partition, so that the result is too.
  std::vector<std::size_t> order(all.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return all[a].clock.process < all[b].clock.process; });
  std::vector<analysis::ProcessComm> sorted;
  std::vector<bool> sortedMine;
  for (auto i : order) {
    sorted.push_back(std::move(all[i]));
    sortedMine.push_back(isMine[i]);
  }
  analysis::consolidate(sorted);
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (!sortedMine[i]) continue;
    const auto& p = sorted[i];
    shard.putProcessClock(p.clock);
    std::size_t begin = 0;
    while (begin < p.events.size()) {
      std::size_t end = begin;
      while (end < p.events.size() && p.events[end].thread == p.events[begin].thread) ++end;
      shard.putCommEvents(p.clock.process, p.events[begin].thread,
                          std::span<const storage::CommEventRecord>(p.events.data() + begin, end - begin));
      begin = end;
    }
  }
}

}  // namespace csp::reduce
