// Evaluating a query over the frames of one process (docs/query.md, "Semantics"). One pass over
// the frames answers every measure of the query for every value of its free variables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "csp/analysis/frames.hpp"
#include "csp/analysis/query.hpp"

namespace csp::analysis {

// The threads of one process and a way to stream their logs.
struct ProcessInput {
  std::string label;                        // e.g. "rank 1 (node7 pid 4242)"
  std::vector<std::uint64_t> threadNumbers;  // the number a query uses for each thread
  std::function<std::vector<std::unique_ptr<EventStream>>()> open;  // one stream per thread, same order
};

struct FrameRow {
  std::uint64_t beginNs = 0, endNs = 0;  // relative to the process's first event
  std::vector<std::pair<std::uint64_t, std::string>> members;  // (thread number, region) of the pruned sub-frame
};

// Results for one binding of the free variables (a single one when there are none).
struct BindingResult {
  std::string label;  // "t=3", or "" without free variables
  double value = 0;   // Value queries; NaN when undefined (a division by zero)
  std::vector<std::string> members;  // Attribute queries: thread numbers or region names
  std::vector<FrameRow> frames;      // Frames queries (at most EvalOptions::maxFrames)
  std::uint64_t frameCount = 0;      // Frames queries: satisfying frames
  std::uint64_t durationNs = 0;      // Frames queries: their total duration
};

struct ProcessResult {
  std::string label;
  std::vector<BindingResult> bindings;
  FrameStats stats;
  std::size_t threads = 0;
  std::vector<std::string> warnings;  // names that match no region, threads that do not exist
};

struct EvalOptions {
  std::size_t maxFrames = 1000;  // Frames queries: rows kept per binding
};

ProcessResult evaluate(const Query& query, const RegionTree& tree, const ProcessInput& process,
                       const EvalOptions& options = {});

}  // namespace csp::analysis
