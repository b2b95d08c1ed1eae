// Across processes from a database (docs/query.md "Across processes"; Benavides ch. 6): the
// region event logs of every process on the reference clock, as one input of the query engine
// whose frames span all processes (dCSP, the aggregated event view of Fig. 6.2), and the
// time-weighted DAG of the run for dCOZ's what-if (causal.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/analysis/causal.hpp"
#include "csp/analysis/database_source.hpp"
#include "csp/storage/database.hpp"

namespace csp::analysis {

// A process without clock data, or a database without any: cross-process analysis is refused.
class ClockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// In a global input, thread t of the process of MPI rank r is number r * kGlobalThreadStride + t.
inline constexpr std::uint64_t kGlobalThreadStride = 1000;

struct GlobalLogs {
  ProcessInput input;              // every thread of every process; frames across all of them
  std::vector<std::string> notes;  // what the bounds are and how wide, for the answer's warnings
  std::uint64_t aggregates = 0;    // aggregated events (groups of events whose intervals overlap)
  std::uint64_t widestNs = 0;      // the widest converted event interval
  std::uint64_t uncertainNs = 0;   // total span of aggregated events of more than one time
  bool guaranteed = true;          // false when some process's bounds rest on an assumed drift
};

// Throws ClockError naming the process when one has no clock data. The database and `logs`
// must outlive the result.
GlobalLogs loadGlobalLogs(const storage::Database& db, const DatabaseLogs& logs);

// When a consolidated event began to wait (its begin for a blocking call), on the reference clock.
storage::TimeInterval waitBeginOf(const storage::ProcessClock& clock, const storage::CommEventRecord& e);

// The time-weighted DAG of the run, every time at the lower bound (`Bound::Lower`), the upper
// bound or the midpoint of its interval. Throws ClockError like loadGlobalLogs.
enum class Bound { Lower, Middle, Upper };
TimeWeightedDag loadDag(const storage::Database& db, const DatabaseLogs& logs, Bound bound);

// dCOZ over a database: the prediction on the midpoints, and the range of the predictions on the
// lower and on the upper bounds.
struct WhatIfRange {
  WhatIf middle;
  double speedupLo = 0, speedupHi = 0;
};
WhatIfRange predictWhatIf(const storage::Database& db, const DatabaseLogs& logs, const std::string& region,
                          double reduction);

}  // namespace csp::analysis

namespace csp::analysis {

// MPI waits across processes (docs/query.md "MPI waits across processes"), from the
// consolidated communication events, per rank; each figure as guaranteed [lower, upper] ns.
struct Bounded {
  std::uint64_t lo = 0, hi = 0;
};
struct KindWaits {
  Bounded wait;
  std::uint64_t count = 0;
};
// Non-blocking operations wait from the start of the wait or test that completed them.
struct RankWaits {
  std::int64_t rank = -1;
  std::string label;
  Bounded lateSender;                        // its receives waiting for their send to begin
  Bounded lateReceiver;                      // its sends begun before their receive did: the message waited
  Bounded collectiveWait;                    // in collectives, from its entry to the last entry it waits for
  std::uint64_t collectives = 0;             // collective instances it took part in
  std::map<CollectiveOp, KindWaits> byKind;  // the same per kind of collective
  std::uint64_t stragglerCertain = 0;        // barrier-like instances (waitsForAll) it certainly entered last
  std::uint64_t stragglerPossible = 0;       // ... it may have entered last
};
// Throws ClockError like loadGlobalLogs.
std::vector<RankWaits> mpiWaits(const storage::Database& db, const DatabaseLogs& logs);

}  // namespace csp::analysis
