// Derived-metric expressions (docs/design.md, "Data model"). Grammar, semantics and examples: docs/metrics.md,
// "Derived metrics". In short:
//
//   definition := name '=' expr
//   expr       := term (('+' | '-') term)*
//   term       := unary (('*' | '/') unary)*
//   unary      := '-' unary | primary
//   primary    := number | name | function '(' expr (',' expr)* ')' | '(' expr ')'
//   name       := [A-Za-z_][A-Za-z0-9_.]*  |  '`' any but '`' '`'  |  '{' any but '}' '}'
//   function   := min | max (2 arguments) | sqrt | log (1 argument, natural log)
//
// A '-' is always an operator outside quotes: write `cpu-time` or {cpu-time} for a metric whose
// name contains one. Arithmetic is IEEE double; x/0, sqrt of a negative number and log of a
// non-positive number are NaN ("undefined", shown blank), and NaN propagates.
//
// Two uses, named differently because they mean different things:
//  - PerThreadDerivedMetric (`csp-prof-mpi --derive`): evaluated per (profile, node) on raw
//    values before aggregation; its results are then accumulated like a raw metric (with a
//    RealAccumulator), so e.g. its mean is the mean over threads of the per-thread ratio.
//  - SummaryFormula: evaluated once per node on finalized statistics, e.g. cycles per
//    instruction as a ratio of sums `cpi = cycles.sum / instructions.sum`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "csp/metrics/accumulator.hpp"

namespace csp::metrics {

// A parse or binding error; column() is 1-based into the text given to parse.
class ExpressionError : public std::runtime_error {
 public:
  ExpressionError(std::size_t column, const std::string& message);
  std::size_t column() const { return column_; }

 private:
  std::size_t column_;
};

class Expression {
 public:
  // Throws ExpressionError with the column of the offending token.
  static Expression parse(std::string_view text);

  const std::string& text() const { return text_; }
  // Distinct names referenced, in order of first occurrence; evaluate() takes their values in
  // this order.
  const std::vector<std::string>& names() const { return names_; }
  // 1-based column of each name's first occurrence in the text that was parsed (the whole
  // definition for parseDefinition), for binding errors.
  std::size_t column(std::size_t nameIndex) const { return columns_.at(nameIndex); }

  // values[i] is the value of names()[i]. Throws std::invalid_argument on a size mismatch.
  double evaluate(std::span<const double> values) const;
  // The error to report when names()[nameIndex] names no metric; it hints at quoting when the
  // name is directly followed by '-' (as in cpu-time, which parses as cpu - time).
  ExpressionError unknownName(std::size_t nameIndex, std::string_view what = "metric") const;
  // Convenience: looks each name up; an unknown name (nullopt) throws ExpressionError.
  double evaluate(const std::function<std::optional<double>(std::string_view)>& lookup) const;

 private:
  friend class ExpressionParser;
  // Compiled to postfix code for a stack machine: evaluation over millions of (profile, node)
  // pairs does no allocation and no tree walking.
  enum class Op : std::uint8_t { Constant, Variable, Negate, Add, Subtract, Multiply, Divide, Min, Max, Sqrt, Log };
  struct Instruction {
    Op op;
    std::uint32_t index = 0;  // Variable: index into names()
    double constant = 0;      // Constant
  };

  std::string text_;
  std::string source_;  // all the parsed text (a definition's too); columns index into it
  std::vector<std::string> names_;
  std::vector<std::size_t> columns_;
  std::vector<Instruction> code_;
  std::size_t maxStack_ = 0;
};

// `name = expr`; throws ExpressionError.
struct Definition {
  std::string name;
  Expression expression;
};
Definition parseDefinition(std::string_view text);

// A metric computed per thread before aggregation (`--derive 'name = expr'`), whose names are raw
// metric names. The caller evaluates it at every (profile, node, scope) where at least one input
// is present, with absent inputs as 0, and accumulates the results in a RealAccumulator.
class PerThreadDerivedMetric {
 public:
  static PerThreadDerivedMetric parse(std::string_view definition);
  const std::string& name() const { return definition_.name; }
  const std::vector<std::string>& inputs() const { return definition_.expression.names(); }
  // nullopt when the result is not finite (e.g. a ratio over a zero): the profile is then absent
  // for this metric at this node, rather than contributing a made-up value.
  std::optional<double> evaluate(std::span<const double> inputValues) const;
  const Expression& expression() const { return definition_.expression; }

 private:
  Definition definition_;
};

// metric[.all|.present][.statistic]; defaults: population all, statistic sum.
struct StatisticRef {
  std::string metric;
  Population population = Population::All;
  Statistic statistic = Statistic::Sum;
  bool operator==(const StatisticRef&) const = default;
};

// A formula over finalized statistics, e.g. `cpi = cycles.sum / instructions.sum` or
// `spread = cycles.max - cycles.min`. A reference is split at its last dots: a trailing
// statistic name (count sum mean min max stddev cfvar imbalance), then optionally `all` or
// `present` before it; the rest is the metric name (so a metric whose name itself ends in, say,
// `.mean` must be written `m.mean.sum`).
class SummaryFormula {
 public:
  static SummaryFormula parse(std::string_view definition);
  const std::string& name() const { return definition_.name; }
  // One per Expression::names() entry, same order.
  const std::vector<StatisticRef>& references() const { return references_; }
  // values[i] is the statistic named by references()[i].
  double evaluate(std::span<const double> values) const { return definition_.expression.evaluate(values); }
  // Convenience: `statisticsOf(metric, population)` returns the finalized statistics or nullopt
  // for an unknown metric (ExpressionError).
  double evaluate(
      const std::function<std::optional<Statistics>(std::string_view metric, Population)>& statisticsOf) const;
  const Expression& expression() const { return definition_.expression; }

 private:
  Definition definition_;
  std::vector<StatisticRef> references_;
};

}  // namespace csp::metrics
