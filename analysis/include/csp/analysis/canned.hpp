// Canned analyses (Benavides ch. 3-4; docs/query.md "Canned analyses"): named sets of queries.
#pragma once

#include <string>
#include <vector>

#include "csp/analysis/evaluate.hpp"
#include "csp/analysis/frames.hpp"

namespace csp::analysis {

struct CannedInfo {
  std::string name;
  std::string arguments;  // e.g. "LOOP BARRIER"
  std::string description;
};

const std::vector<CannedInfo>& cannedAnalyses();

// One result row of a canned analysis in one process.
struct CannedRow {
  std::string name;   // e.g. "straggler-degree"
  std::string key;    // e.g. "t=3", "" for a process-wide figure
  Number value;       // none: undefined (nothing to divide by)
  std::string unit;   // "ns", "thread-ns", "ratio", "thread", "threads"
  std::string query;  // the query that computed it (for --format json and the docs)
};

// Throws QueryError (column 0) for an unknown analysis or wrong arguments. `warnings` gets what
// its queries warn about (a region name that matches no region), each once.
std::vector<CannedRow> runCanned(const std::string& name, const std::vector<std::string>& args, const RegionTree& tree,
                                 const ProcessInput& process, std::vector<std::string>* warnings = nullptr);

}  // namespace csp::analysis
