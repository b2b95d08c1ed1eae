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
#include "csp/views/views.hpp"

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

// --- what a browser asks beside the views (the web viewer, docs/web.md) ------------------------
// One thread's own top contexts: the CCT nodes where this profile has the largest values of a
// metric in a scope (exclusive: the statements where its samples landed, as exclusive values
// nest; inclusive: the heaviest subtrees of any kind).
struct ThreadContext {
  storage::NodeId node = 0;  // CCT node id
  std::string label;         // "solve.c:42 in solve", "solve (solve.c:40)"
  std::string kind;          // toString(NodeKind)
  double value = 0;
};
struct ThreadContexts {
  storage::ProfileId profile = 0;
  std::string who;  // "rank 3 thread 1"
  std::string threadClass;
  std::string metric, unit;
  storage::MetricScope scope = storage::MetricScope::Exclusive;
  double total = 0;                      // the thread's inclusive value at the root
  std::vector<ThreadContext> contexts;   // by value descending, at most `top`
  std::uint64_t contextsWithValues = 0;  // nodes with a value in the scope, of any kind
};
// ViewError for an unknown profile or metric.
ThreadContexts topContexts(const storage::Database& db, storage::ProfileId profile, const std::string& metric,
                           storage::MetricScope scope, std::size_t top);

// A source file with the costs of its lines (the Flat view's rows of that file: statements,
// loops, call sites and procedures at their lines).
struct SourceLine {
  std::uint32_t line = 0;
  std::string kind;            // toString(NodeKind) of the row: Statement, Loop, CallSite, Procedure, Inlined
  std::string name;            // procedure or callee name, loop label
  std::vector<double> values;  // per column of `columns`
};
struct SourceFile {
  std::string file;       // as recorded in the database
  bool readable = false;  // the text could be read on this machine
  std::string reason;     // why not
  std::string text;       // the file's contents (at most kMaxSourceBytes)
  std::vector<Column> columns;
  std::vector<std::string> units;
  std::vector<double> rootSum;    // per column, for percentages
  std::vector<SourceLine> lines;  // ascending line, rows of one line in Flat view order
  std::vector<std::string> warnings;
};
inline constexpr std::size_t kMaxSourceBytes = 8u << 20;

// Region intervals of a time window from the region event logs, per process one lane per
// thread. Times are ns since the process's first event (as csp-query's frames).
struct TimelineInterval {
  std::uint64_t beginNs = 0, endNs = 0;
  std::uint32_t region = 0;  // region tree node; 0: several short visits merged (see `visits`)
  std::uint32_t depth = 0;   // nesting, 0 outermost
  std::uint64_t visits = 1;  // visits drawn as this interval (> 1: merged, each shorter than the resolution)
  bool openBefore = false;   // began before the window
  bool openAfter = false;    // ends after the window (or never ended)
};
struct TimelineLane {
  storage::ProfileId thread = 0;  // profile id
  std::string who;
  std::string threadClass;
  std::vector<TimelineInterval> intervals;  // by begin time
  std::uint64_t eventsRead = 0;
};
struct TimelineFrame {
  std::uint64_t beginNs = 0, endNs = 0;
  std::string binding;  // the query's binding ("" without free variables)
};
struct TimelineProcess {
  storage::ProfileId process = 0;
  std::string label;             // as csp-query labels it
  std::uint64_t durationNs = 0;  // first to last event of any of its threads
  std::vector<TimelineLane> lanes;
  std::vector<TimelineFrame> frames;  // the query's frames in the window
  std::uint64_t framesInAll = 0;      // the query's satisfying frames (all of the run)
};
struct Timeline {
  std::uint64_t fromNs = 0, toNs = 0;  // the window
  std::uint64_t resolutionNs = 0;      // shorter visits are merged
  std::vector<std::string> regions;    // name by region tree node
  std::vector<TimelineProcess> processes;
  std::string query;  // highlighted
  std::vector<std::string> warnings;
};

}  // namespace csp::views
