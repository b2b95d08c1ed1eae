// What the presentation layer answers beside view trees and drill-downs (views.hpp), as data:
// a renderer (render.hpp) prints it and a server sends its JSON. Each answer holds what it shows
// and no reference to the database it came from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "csp/analysis/diff.hpp"
#include "csp/analysis/evaluate.hpp"
#include "csp/storage/database.hpp"

namespace csp::views {

// --- the experiment (csp-views --info) ----------------------------------------------------------
struct DatabaseInfo {
  std::filesystem::path directory;
  storage::FormatVersion format;
  std::uint64_t bytes = 0;  // on disk
  storage::DatabaseMetadata metadata;
  std::vector<storage::RegionMetricInfo> regionMetrics;  // regionMetricsOf
};
DatabaseInfo describe(const storage::Database& db);

// --- a concurrency query (csp-query) ------------------------------------------------------------
// A value of one process: a number (measures, arithmetic, canned figures) or a set.
struct QueryCell {
  enum class Kind : std::uint8_t { Absent, Number, Threads, Regions } kind = Kind::Absent;
  analysis::Number number;
  std::vector<std::string> items;  // Threads (decimal numbers), Regions (names)
};

struct QueryRow {
  std::string name;  // "value", a binding ("t=3"), a canned figure ("straggler-degree t=3")
  std::string unit;
  std::vector<QueryCell> cells;  // per process
};

struct QueryAnswer {
  std::vector<std::string> processes;  // labels
  // A query without measure answers with frames (`results`, at most `limit` per binding), any
  // other query and a canned analysis with rows, in the order they were first met.
  bool frames = false;
  std::vector<QueryRow> rows;
  std::vector<analysis::ProcessResult> results;
  std::size_t limit = 0;
  std::vector<std::string> warnings;  // each once, "warning: ..."; no renderer prints them
};

// --- scaling loss (csp-diff) --------------------------------------------------------------------
// One context of the report.
struct DiffRow {
  storage::NodeId node = 0;  // in the union CCT (the diff database's CCT node id)
  std::string label;         // contextLabel
  char mark = ' ';           // '~' within sampling error, '+' only in run Q, '-' only in run P
  analysis::ScopeDiff inclusive, exclusive;
};

// docs/diff.md, "Report": the total, the loss hot path and the lists of contexts.
struct DiffReport {
  metrics::ScalingStudy study;
  std::string metric, unit;
  analysis::DiffRun runP, runQ;
  // False for a diff database read back: it does not store the runs' profile and context counts
  // and skipped inputs.
  bool runCountsKnown = true;
  analysis::ScopeDiff total;
  std::vector<storage::NodeId> hotPath;  // from below the root; empty when none (or no loss)
  std::string hotPathLabel;
  analysis::ScopeDiff hotPathEnd;             // inclusive values of its last context
  std::vector<DiffRow> losses;                // the top contexts by inclusive loss
  std::vector<DiffRow> gains;                 // the largest gains, at most 3
  std::vector<DiffRow> oneRunOnly;            // outermost contexts of one run only, by |loss|
  std::size_t oneRunOnlyCount = 0;            // of them in all
  std::uint64_t onlyP = 0, onlyQ = 0;         // union nodes in one run only
  bool exact = false;                         // the metric has no sampling error in either run
  std::vector<analysis::StateExcess> states;  // waiting and compute (csp-run --idleness)
};

// The report of `top` contexts per list.
DiffReport diffReport(const analysis::ScalingDiff& diff, std::size_t top,
                      std::vector<analysis::StateExcess> states = {});

// "main > solve.c:12 > MPI_Allreduce" style label of a union node: file base names, call sites
// without a line left out, the innermost part of long paths.
std::string contextLabel(const analysis::ScalingDiff& diff, storage::NodeId node);

}  // namespace csp::views
