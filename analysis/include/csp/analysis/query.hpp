// The CSP query language (Benavides ch. 3, Fig. 3.1; reference: docs/query.md).
//
//   Duration(∃t : (t, solve))              time with some thread in solve
//   Area(exists t: (t, lock))              thread-time spent in lock
//   Duration(∃1 t : (t, L) ∧ ∀u ≠ t : (u, B)) / Duration(∃t : (t, L))   straggler degree
//   Duration((t, main))                    t is free: one value per thread
//   WhatRegions((0, r) ∨ (1, r)) ...       sets of regions or threads
//   ∃t : (t, update, attr in (100, inf))  the pruned frames themselves
//
// parseQuery() builds the syntax tree; errors carry the 1-based column (in characters).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace csp::analysis {

class QueryError : public std::runtime_error {
 public:
  QueryError(std::size_t column, const std::string& message);
  std::size_t column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  std::size_t column_;
  std::string message_;
};

enum class VarType : std::uint8_t { Thread, Region };

struct Variable {
  std::string name;
  VarType type = VarType::Thread;
  bool free = false;  // not bound by a quantifier: the query is evaluated once per value
  std::size_t column = 0;
};

// A thread or region position: a variable, a number, or (regions only) a name.
struct Term {
  enum class Kind : std::uint8_t { Var, Number, Name } kind = Kind::Name;
  int var = -1;                            // Var: index into Query::variables
  std::uint64_t number = 0;                // Number: a thread number, or a region "N" / "region-N"
  std::string name;                        // Name: a region name
  std::optional<std::uint64_t> dynamicId;  // region "name#id"
  std::size_t column = 0;
};

// An attribute range [lo, hi] with open ends and infinities; integers.
struct Range {
  bool hasLo = false, hasHi = false;
  std::int64_t lo = 0, hi = 0;  // inclusive bounds after normalisation
  bool contains(std::int64_t v) const { return (!hasLo || v >= lo) && (!hasHi || v <= hi); }
  bool empty() const { return hasLo && hasHi && lo > hi; }
};

// Constraint on a quantified variable: var (= | ≠ | ∈ | ∉) values, combined left to right with
// ∧ / ∨ (Fig. 3.1's Constraints).
struct Constraint {
  enum class Op : std::uint8_t { Equal, NotEqual, In, NotIn } op = Op::Equal;
  int var = -1;
  std::vector<Term> values;
  enum class Join : std::uint8_t { None, And, Or } join = Join::None;  // how it joins the previous one
};

struct Formula {
  enum class Kind : std::uint8_t { Predicate, And, Or, Not, ForAll, Exists, ExistsExactly } kind = Kind::Predicate;
  // Predicate: (thread, region [, filter])
  Term thread, region;
  std::optional<Range> filter;
  // And, Or: a, b; Not: a; quantifiers: var, constraints, a = body
  std::unique_ptr<Formula> a, b;
  int var = -1;
  std::uint64_t k = 0;
  std::vector<Constraint> constraints;
  std::size_t column = 0;
};

struct Interval {
  std::uint64_t beginNs = 0, endNs = UINT64_MAX;  // relative to the process's first event
};

enum class Measure : std::uint8_t { Duration, MaxPar, Area };
enum class Attribute : std::uint8_t { WhichThreads, WhatRegions };

// A measure or attribute applied to a frame query over an optional interval.
struct FrameQuery {
  std::unique_ptr<Formula> formula;
  std::optional<Interval> interval;
};

struct Expr {
  enum class Kind : std::uint8_t { Number, Measure, Count, Neg, Add, Sub, Mul, Div } kind = Kind::Number;
  double number = 0;
  std::optional<std::uint64_t> integer;  // Number: written as a whole number (exact)
  Measure measure = Measure::Duration;
  Attribute attribute = Attribute::WhichThreads;  // Count
  int call = -1;                                  // Measure, Count: index into Query::calls
  std::unique_ptr<Expr> a, b;
};

struct Query {
  enum class Kind : std::uint8_t { Value, Attribute, Frames } kind = Kind::Value;
  std::string text;
  std::vector<Variable> variables;
  std::vector<FrameQuery> calls;                  // the frame queries the expression uses
  std::unique_ptr<Expr> expr;                     // Value
  Attribute attribute = Attribute::WhichThreads;  // Attribute: of calls[0]
  // Frames: calls[0] without measure: the pruned frames are the result.
  std::vector<int> freeVariables() const;
};

Query parseQuery(const std::string& text);

// A region name in a list of text or CSV output: as it is, or in double quotes with '"' and '\'
// escaped by '\' (as the query language reads it) when it is empty or holds whitespace, a quote,
// a backslash, a comma or a parenthesis, so that the items of a list can be told apart.
std::string listItem(const std::string& name);

const char* toString(Measure m);
const char* toString(Attribute a);

}  // namespace csp::analysis
