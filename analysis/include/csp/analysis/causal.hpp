// Across processes (Benavides ch. 5-6; docs/postprocessing.md "Clocks across processes",
// docs/query.md "Across processes"): the consolidation of communication events onto the
// reference clock with causality enforced, and dCOZ's what-if speed-up on the time-weighted DAG
// of the run. No MPI, no database: csp-prof-mpi consolidates with it, csp-query predicts with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "csp/storage/database.hpp"

namespace csp::analysis {

// One process: its clock and its threads' communication events (local times; the intervals are
// filled by consolidate()).
struct ProcessComm {
  storage::ProcessClock clock;
  std::vector<storage::CommEventRecord> events;  // by thread, each thread's in time order
};

struct ConsolidationStats {
  std::uint64_t matchedMessages = 0;    // send/receive pairs found
  std::uint64_t unmatchedMessages = 0;  // sends or receives without their partner
  std::uint64_t collectives = 0;        // collective instances (two members or more seen)
  std::uint64_t tightened = 0;          // bounds narrowed by causality
  std::uint64_t conflicts = 0;          // matched pairs whose bounds contradicted causality: left as converted
};

// What the exit of each member of one collective instance waits for, as indices into `members`,
// no more than MPI guarantees: every member's entry (barrier, allreduce, allgather(v),
// alltoall(v), reduce-scatter(-block)); the root's entry (the other members of bcast and
// scatter(v); the root waits for nobody); every entry (the root of reduce and gather(v); their
// other members wait for nobody); the entries of the members of lower rank in the communicator
// (scan, exscan). A collective of unknown kind (databases before format 1.8) counts as waiting
// for all when it has no root (peer -1), for nobody otherwise.
struct CollectiveMember {
  CollectiveOp op = CollectiveOp::Unknown;
  std::int32_t root = -1;      // world rank, -1 none, -2 scan
  std::int64_t rank = -1;      // the member's world rank
  std::int32_t commRank = -1;  // its rank in the communicator (scans)
};
std::vector<std::vector<std::size_t>> collectiveWaits(const std::vector<CollectiveMember>& members);
// Whether every member waits for every other (barrier-like): what straggler scores are about.
bool waitsForAll(CollectiveOp op, std::int32_t root);

// Partners across processes: a send and its receive (same sender, receiver, tag, communicator
// and sequence number); the members of one instance of a collective (same communicator and
// instance number), with the (entry, exit) orders that collectiveWaits gives.
struct EventRef {
  std::size_t process = 0, event = 0;
};
struct CommPartners {
  std::vector<std::pair<EventRef, EventRef>> messages;  // (send, receive)
  std::vector<std::vector<EventRef>> collectives;
  std::vector<std::pair<EventRef, EventRef>> collectiveOrders;  // (entry, exit that waits for it)
  std::uint64_t unmatchedMessages = 0;
};
CommPartners matchPartners(const std::vector<ProcessComm>& processes);

// The reference-clock interval of every event from its process's clock (no clock: [0, 2^64-1],
// unknown), then causality: a receive ends after its send begins, a collective's exit is after
// the entries it waits for (collectiveWaits), and within a thread events keep their order. Bounds are
// only ever narrowed, never widened, and only where causality forces it: since the true times obey
// causality, narrowed bounds still contain them. Deterministic; per-process counts in `clock`.
ConsolidationStats consolidate(std::vector<ProcessComm>& processes);

}  // namespace csp::analysis

namespace csp::analysis {

// dCOZ (Benavides 6.3, Algorithm 6): the time-weighted DAG of a run. Vertices are, per thread in
// its order, region enters and exits and the begins and ends of communication events, at times
// on the reference clock. Edges between consecutive vertices of a thread are inelastic (compute:
// their duration is kept, or shortened when the thread is inside the region being sped up),
// except the edge into a receive's end and into a collective's exit, which are elastic: such an
// end waits for its own begin and for its causal predecessors (the matched send's begin; the
// entries collectiveWaits names), plus the part of the original wait that no predecessor
// explains. A non-blocking operation has a CommWait vertex at the start of the wait or test that
// completed it: the edge from its start to there is the program's compute.
struct DagVertex {
  enum class Kind : std::uint8_t { Enter, Exit, CommBegin, CommEnd, CommWait } kind = Kind::Enter;
  std::uint64_t timeNs = 0;  // on the reference clock
  std::uint32_t region = 0;  // Enter/Exit: region tree node
  std::uint32_t comm = 0;    // CommBegin/CommEnd: index into TimeWeightedDag::comm
};

struct DagComm {
  CommKind kind = CommKind::Send;
  std::int64_t rank = -1;  // the process's rank
  std::int32_t peer = 0, tag = 0;
  std::uint64_t communicator = 0, sequence = 0;
  std::uint32_t thread = 0, beginVertex = 0, endVertex = 0;  // set by TimeWeightedDag::add
  CollectiveOp op = CollectiveOp::Unknown;
  bool blocking = true;  // no CommWait vertex: the edge from its begin to its end is the call
};

struct TimeWeightedDag {
  std::vector<std::vector<DagVertex>> threads;  // each in its order
  std::vector<DagComm> comm;
  // Region tree: a thread is inside region r when a node named r is on its stack.
  std::vector<std::uint32_t> regionParent;
  std::vector<std::string> regionName;
};

struct WhatIf {
  std::string region;
  double reduction = 0;           // fraction of the region's compute time removed, 0..1
  std::uint64_t originalNs = 0;   // first to last vertex of the run
  std::uint64_t predictedNs = 0;  // the same after the replay with the region sped up
  std::uint64_t regionNs = 0;     // compute time inside the region, all threads (the most it could save)
  double speedup() const {        // (original - predicted) / original
    return originalNs == 0 ? 0 : (static_cast<double>(originalNs) - static_cast<double>(predictedNs)) / originalNs;
  }
};

// Replays the DAG with the compute edges inside `region` shortened by `reduction` (Algorithm 6,
// as a replay in causal order). A reduction of 0 reproduces the run. Throws std::invalid_argument
// when the DAG has a causal cycle (inconsistent input).
WhatIf whatIf(const TimeWeightedDag& dag, const std::string& region, double reduction);

}  // namespace csp::analysis
