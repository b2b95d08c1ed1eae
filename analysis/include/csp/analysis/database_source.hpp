// The region event logs of a CSP database as query inputs: the region tree and one
// ProcessInput per measured process (docs/query.md, "Where the logs come from").
#pragma once

#include <string>
#include <vector>

#include "csp/analysis/evaluate.hpp"
#include "csp/analysis/frames.hpp"
#include "csp/storage/database.hpp"

namespace csp::analysis {

struct DatabaseLogs {
  RegionTree tree;
  std::vector<ProcessInput> processes;  // ascending process id; the database must outlive them
  bool hasLogFamily = false;            // false: written before format 1.2
  std::uint64_t events = 0;             // stored events, all processes
  std::uint64_t eventsLost = 0;         // events not logged (full buffers), all processes
};

DatabaseLogs loadLogs(const storage::Database& db);

// Why a database without logs has none, and what to do: for error messages.
std::string noLogsExplanation(const storage::Database& db, const DatabaseLogs& logs);

}  // namespace csp::analysis
