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
  std::uint64_t collectives = 0;        // instances of all-to-all collectives (every member seen)
  std::uint64_t tightened = 0;          // bounds narrowed by causality
  std::uint64_t conflicts = 0;          // matched pairs whose bounds contradicted causality: left as converted
};

// Partners across processes: a send and its receive (same sender, receiver, tag, communicator
// and sequence number); the members of one instance of an all-to-all collective (same
// communicator and instance number, peer -1).
struct EventRef {
  std::size_t process = 0, event = 0;
};
struct CommPartners {
  std::vector<std::pair<EventRef, EventRef>> messages;  // (send, receive)
  std::vector<std::vector<EventRef>> collectives;
  std::uint64_t unmatchedMessages = 0;
};
CommPartners matchPartners(const std::vector<ProcessComm>& processes);

// The reference-clock interval of every event from its process's clock (no clock: [0, 2^64-1],
// unknown), then causality: a receive ends after its send begins, an all-to-all collective's
// exit is after every member's entry, and within a thread events keep their order. Bounds are
// only ever narrowed, never widened, and only where causality forces it: since the true times obey
// causality, narrowed bounds still contain them. Deterministic; per-process counts in `clock`.
ConsolidationStats consolidate(std::vector<ProcessComm>& processes);

}  // namespace csp::analysis

namespace csp::analysis {

// dCOZ (Benavides 6.3, Algorithm 6): the time-weighted DAG of a run. Vertices are, per thread in
// its order, region enters and exits and the begins and ends of communication events, at times
// on the reference clock. Edges between consecutive vertices of a thread are inelastic (compute:
// their duration is kept, or shortened when the thread is inside the region being sped up),
// except the edge into a receive's end and into an all-to-all collective's exit, which are
// elastic: such an end waits for its own begin and for its causal predecessors (the matched send's
// begin; every member's entry), plus the part of the original wait that no predecessor explains.
struct DagVertex {
  enum class Kind : std::uint8_t { Enter, Exit, CommBegin, CommEnd } kind = Kind::Enter;
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
