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
  std::string label;                                                // e.g. "rank 1 (node7 pid 4242)"
  std::vector<std::uint64_t> threadNumbers;                         // the number a query uses for each thread
  std::function<std::vector<std::unique_ptr<EventStream>>()> open;  // one stream per thread, same order
  std::uint64_t events = 0;                   // events of all its threads, which bound its frames (0: not known)
  std::uint64_t process = 0;                  // the database's process id (smallest profile id), when from one
  std::vector<std::uint64_t> threadProfiles;  // the profile id of each thread, when from a database
};

// A number a query computes (docs/query.md, "Numbers"): measures and counts are exact integers,
// and so are sums, differences and products of integers and whole literals while they fit 128
// bits; a division, a literal with a fraction or a unit, or an integer result beyond 128 bits
// makes a real; a division by zero gives none.
struct Number {
  __extension__ using Int = __int128;
  enum class Kind : std::uint8_t { None, Integer, Real } kind = Kind::None;
  Int integer = 0;
  double real = 0;
  static Number ofInteger(Int v) { return {Kind::Integer, v, 0}; }
  static Number ofReal(double v) { return {Kind::Real, 0, v}; }
  double toDouble() const;  // NaN for none
};
// Integers as their exact decimal digits, reals as the shortest text that reads back as the same
// double ("0.42857142857142855", "1e+300"), none as "nan".
std::string toString(const Number& n);
// Exact for integers, by value otherwise; none is less than every number.
bool operator<(const Number& a, const Number& b);
// The median of a sorted list (none when empty): the middle value, or the mean of the two
// middle ones, exact when they are integers of even sum.
Number median(const std::vector<Number>& sorted);

struct FrameRow {
  std::uint64_t beginNs = 0, endNs = 0;                        // relative to the process's first event
  std::vector<std::pair<std::uint64_t, std::string>> members;  // (thread number, region) of the pruned sub-frame
};

// Results for one binding of the free variables (a single one when there are none).
struct BindingResult {
  std::string label;                 // "t=3", or "" without free variables
  Number number;                     // Value queries; none when undefined (a division by zero)
  double value = 0;                  // the same as a real (NaN: none), for arithmetic
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
  // The most predicate and constraint evaluations a query may need in the worst case (frames x
  // bindings x per-frame cost of its quantifiers after factoring) unless that is within 64
  // one-level scans of the logs; a query beyond is refused with a QueryError before any frame is
  // read (docs/query.md, "Cost"). 1e10 take 10 to 30 s on one core.
  double maxWork = 1e10;
};

ProcessResult evaluate(const Query& query, const RegionTree& tree, const ProcessInput& process,
                       const EvalOptions& options = {});

}  // namespace csp::analysis
