// Consolidation and dCOZ's replay on hand-made inputs (analysis/causal.hpp): causality narrows
// bounds and never widens them, contradictions are counted, and the replay of a known DAG moves
// the end of the run by what lies on its critical path only.
#include <gtest/gtest.h>

#include "csp/analysis/causal.hpp"

using namespace csp;
using namespace csp::analysis;

namespace {

storage::CommEventRecord event(CommKind kind, std::uint64_t begin, std::uint64_t end, std::int32_t peer,
                               std::uint64_t sequence = 0) {
  storage::CommEventRecord e;
  e.kind = kind;
  e.localBeginNs = begin;
  e.localEndNs = end;
  e.peer = peer;
  e.tag = 5;
  e.sequence = sequence;
  return e;
}

ProcessComm process(std::int64_t rank, ClockSync clock, std::vector<storage::CommEventRecord> events) {
  ProcessComm p;
  p.clock.process = static_cast<std::uint32_t>(rank);
  p.clock.rank = rank;
  p.clock.clock = clock;
  p.events = std::move(events);
  for (auto& e : p.events) e.thread = static_cast<std::uint32_t>(rank);
  return p;
}

// Rank 1's clock is rank 0's, known to within [-100, +100] ns (zeros at 0 and 1,000,000).
ClockSync wide() { return {ClockState::Measured, 0, 0, 0, 200, 1'000'000, 1'000'000 - 100, 1'000'000 + 100, 8, 0}; }

TEST(Consolidate, AReceiveNarrowsItsSendAndNothingWidens) {
  std::vector<ProcessComm> ps;
  ps.push_back(process(0, {ClockState::Reference}, {event(CommKind::Recv, 400'000, 500'030, 1)}));
  ps.push_back(process(1, wide(), {event(CommKind::Send, 500'000, 500'010, 0)}));
  const auto stats = consolidate(ps);
  EXPECT_EQ(stats.matchedMessages, 1u);
  EXPECT_EQ(stats.conflicts, 0u);
  const auto& send = ps[1].events[0];
  const auto& recv = ps[0].events[0];
  EXPECT_EQ(recv.end.lo, 500'030u);  // exact, untouched
  EXPECT_EQ(recv.end.hi, 500'030u);
  // Converted alone the send begin would reach past the receive's end; causality cuts it there.
  EXPECT_LE(send.begin.hi, recv.end.hi);
  EXPECT_LE(send.begin.lo, 500'000u);  // still holds the true time (rank 1's clock is true here)
  EXPECT_GE(send.begin.hi, 500'000u);
  EXPECT_GT(stats.tightened, 0u);
}

TEST(Consolidate, ContradictionsAreCountedNotApplied) {
  std::vector<ProcessComm> ps;
  // The receive ends (exactly) long before its send begins: a broken clock assumption.
  ps.push_back(process(0, {ClockState::Reference}, {event(CommKind::Recv, 100, 200, 1)}));
  ps.push_back(process(1, {ClockState::SameClock}, {event(CommKind::Send, 5'000, 5'010, 0)}));
  const auto stats = consolidate(ps);
  EXPECT_EQ(stats.conflicts, 1u);
  EXPECT_EQ(ps[1].events[0].begin.lo, 5'000u);
  EXPECT_EQ(ps[0].events[0].end.hi, 200u);
}

TEST(Consolidate, UnmatchedAndClocklessProcessesStayUnknown) {
  std::vector<ProcessComm> ps;
  ps.push_back(process(0, {ClockState::Reference}, {event(CommKind::Send, 10, 20, 1, 7)}));
  ps.push_back(process(1, {ClockState::None}, {event(CommKind::Recv, 10, 20, 0, 8)}));
  const auto stats = consolidate(ps);
  EXPECT_EQ(stats.matchedMessages, 0u);
  EXPECT_EQ(stats.unmatchedMessages, 2u);
  EXPECT_EQ(ps[1].events[0].begin.lo, 0u);
  EXPECT_EQ(ps[1].events[0].begin.hi, ~std::uint64_t{0});
}

// Rank 1: region R [0, 100) then a send at 100; rank 0: region Q [0, 30), a receive [30, 101).
TimeWeightedDag knownDag() {
  TimeWeightedDag d;
  d.regionParent = {0xFFFFFFFFu, 0, 0};
  d.regionName = {"", "R", "Q"};
  d.comm.push_back({CommKind::Recv, 0, 1, 5, 0, 0, 0, 2, 3});
  d.comm.push_back({CommKind::Send, 1, 0, 5, 0, 0, 1, 2, 3});
  using K = DagVertex::Kind;
  d.threads.push_back({{K::Enter, 0, 2, 0}, {K::Exit, 30, 2, 0}, {K::CommBegin, 30, 0, 0}, {K::CommEnd, 101, 0, 0}});
  d.threads.push_back({{K::Enter, 0, 1, 0}, {K::Exit, 100, 1, 0}, {K::CommBegin, 100, 0, 1}, {K::CommEnd, 100, 0, 1}});
  return d;
}

TEST(WhatIf, OnlyTheCriticalPathShortensTheRun) {
  const auto d = knownDag();
  const auto none = whatIf(d, "R", 0);
  EXPECT_EQ(none.predictedNs, none.originalNs);  // a reduction of 0 reproduces the run
  EXPECT_EQ(none.originalNs, 101u);
  const auto r = whatIf(d, "R", 0.2);
  EXPECT_EQ(r.regionNs, 100u);
  EXPECT_EQ(r.predictedNs, 81u);  // the send moves 20 earlier, and the receive's end with it
  const auto q = whatIf(d, "Q", 0.5);
  EXPECT_EQ(q.regionNs, 30u);
  EXPECT_EQ(q.predictedNs, 101u);  // rank 0 only waits longer
  // Beyond the point where the receiver becomes late, the gain stops at Q's end.
  const auto big = whatIf(d, "R", 0.9);
  EXPECT_EQ(big.predictedNs, 31u);
}

}  // namespace

// What each member of a collective waits for: no more than MPI guarantees per kind.
TEST(CollectiveWaits, EachKindWaitsForWhatMpiGuaranteesOnly) {
  auto members = [](CollectiveOp op, std::int32_t root) {
    std::vector<CollectiveMember> m;
    for (std::int32_t r = 0; r < 3; ++r) m.push_back({op, root, r, 2 - r});  // comm ranks reversed
    return m;
  };
  using W = std::vector<std::vector<std::size_t>>;
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Barrier, -1)), (W{{1, 2}, {0, 2}, {0, 1}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Bcast, 1)), (W{{1}, {}, {1}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Scatterv, 0)), (W{{}, {0}, {0}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Reduce, 2)), (W{{}, {}, {0, 1}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Gather, 0)), (W{{1, 2}, {}, {}}));
  // Scans by rank in the communicator: world rank 2 is comm rank 0.
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Scan, -2)), (W{{1, 2}, {2}, {}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Exscan, -2)), (W{{1, 2}, {2}, {}}));
  // Databases before format 1.8: unknown kinds wait for all without a root, else for nobody.
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Unknown, -1)), (W{{1, 2}, {0, 2}, {0, 1}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Unknown, 0)), (W{{}, {}, {}}));
  EXPECT_EQ(collectiveWaits(members(CollectiveOp::Unknown, -2)), (W{{}, {}, {}}));
}

// A non-root of a broadcast ends after the root began; a non-root of a reduce is left alone.
TEST(Consolidate, RootedCollectivesOrderOnlyWhatTheyGuarantee) {
  auto coll = [](CollectiveOp op, std::uint64_t b, std::uint64_t e, std::int32_t root, std::int32_t commRank) {
    auto x = event(CommKind::Collective, b, e, root);
    x.op = op;
    x.tag = commRank;
    return x;
  };
  std::vector<ProcessComm> ps;
  // Rank 1's clock is uncertain by +-100 ns: its bcast exit at 500'050 (true) may be read
  // earlier than rank 0's (the root) entry at 500'000 unless causality narrows it.
  ps.push_back(
      process(0, {ClockState::Reference},
              {coll(CollectiveOp::Bcast, 500'000, 500'010, 0, 0), coll(CollectiveOp::Reduce, 600'000, 600'010, 0, 0)}));
  ps.push_back(
      process(1, wide(),
              {coll(CollectiveOp::Bcast, 400'000, 500'050, 0, 1), coll(CollectiveOp::Reduce, 700'000, 700'010, 0, 1)}));
  ps[0].events[1].sequence = ps[1].events[1].sequence = 1;
  std::vector<ProcessComm> alone{ps[1]};
  consolidate(alone);
  consolidate(ps);
  const auto& bcastExit = ps[1].events[0].end;
  ASSERT_LT(alone[0].events[0].end.lo, 500'000u);  // as converted: before the root's entry
  EXPECT_EQ(bcastExit.lo, 500'000u);               // narrowed to the root's entry
  EXPECT_EQ(bcastExit.hi, alone[0].events[0].end.hi);
  // The reduce's root (rank 0) exits at 600'010, before rank 1 entered (700'000): ordered after
  // every entry, the root's exit conflicts; the non-root's exit is ordered after nothing.
  EXPECT_EQ(ps[1].events[1].end, alone[0].events[1].end);
  EXPECT_EQ(ps[0].clock.conflicts, 1u);
}
