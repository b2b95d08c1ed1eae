// The views of CSP (docs/views.md): Calling Context, Callers, Flat and Regions views built on
// demand from a database, selected and pruned for display; and the per-thread drill-down.
//
//   auto db = storage::Database::open(dir);
//   ViewRequest request;                       // what to show
//   request.kind = ViewKind::Flat;
//   ViewTree tree = buildView(*db, request);   // built, finalized, pruned, sorted
//   renderText(tree, std::cout, {});           // render.hpp: text, CSV, JSON, folded, speedscope
//
// This header is the view engine. The presentation layer around it: request.hpp builds requests
// from a tool's options, session.hpp answers them over a database opened once (lazily, node by
// node), render.hpp prints every answer of every tool.
//
// A ViewTree holds only what is shown. Callers and Flat values are combined from the stored
// non-finalized accumulators with instance counting (thesis Fig. 7.7); docs/views.md says what
// every statistic means for a combined node.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/metrics/accumulator.hpp"
#include "csp/storage/database.hpp"

namespace csp::views {

// A request that cannot be served: unknown metric or node, conflicting options. what() is one
// line for the user.
class ViewError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ViewKind : std::uint8_t { CallingContext, Callers, Flat, Regions };
const char* toString(ViewKind kind);

using Statistic = metrics::Statistic;  // one of each: views select the statistics metrics define
using metrics::parseStatistic;
using metrics::toString;
// Whether a column also gets a share of the root: not for spreads, ratios and counts.
bool hasPercent(Statistic statistic);

// Kinds of a view node: the CCT's scopes plus the Flat view's module and file levels and the
// Regions view's regions. In the Callers view a caller is a Procedure whose file:line is the call
// site in the caller.
enum class NodeKind : std::uint8_t { Root, Module, File, Procedure, Inlined, Loop, CallSite, Statement, Region };
const char* toString(NodeKind kind);

// One displayed column: a statistic of one metric in one scope.
struct Column {
  std::string metric;  // metric name as in the database (Regions: "visits" or "time")
  Statistic statistic = Statistic::Sum;
  storage::MetricScope scope = storage::MetricScope::Inclusive;
  // Non-empty: a formula over finalized statistics (metrics::SummaryFormula, docs/metrics.md),
  // e.g. "cpi = cycles.sum / instructions.sum", evaluated per node on this column's scope;
  // `metric` is then its name and `statistic` is unused.
  std::string formula = {};
  std::string title() const;  // "time:sum:I" ("cpi:I" for a formula)
  bool operator==(const Column&) const = default;
};

struct ViewRequest {
  ViewKind kind = ViewKind::CallingContext;
  std::vector<Column> columns;  // empty: the first metric, sum, inclusive and exclusive
  metrics::Population population = metrics::Population::All;

  // Ordering: by a column (descending) or by name (ascending).
  std::optional<Column> sortBy;  // empty: the first column
  bool sortByName = false;

  // Navigation.
  std::optional<unsigned> depth;         // levels shown below the top level; empty: unlimited
  double thresholdPercent = 1.0;         // hide nodes below this share of the root (0: show all)
  std::optional<double> hotPathPercent;  // descend while a child holds >= this share of its parent
  std::string focus;                     // re-root at a node id or at nodes of this name
  std::vector<std::string> hide;         // glob patterns (a plain word matches as a substring)
  std::vector<std::string> keep;
  std::optional<std::size_t> top;  // Flat/Callers: only the N hottest procedures
  std::size_t topOffset = 0;       // with top: skip this many hottest first (page k of N: k * N)

  // Which threads the statistics are over (docs/views.md, "Thread classes"): "" for the default
  // (the main and worker threads when the database has helper threads, else all), "all", "work"
  // (main and worker), or a comma-separated list of the classes main, worker, helper.
  std::string threads;
};

// The threads a request's statistics are over, resolved against a database
// (storage::selectThreads). Throws ViewError for an unknown class, or a class selection on a
// database without classes (format before 1.4) other than "all".
using storage::ThreadSelection;
ThreadSelection selectThreads(const storage::Database& db, const std::string& threads);

// What selection left out, for the summary line.
struct PruneSummary {
  std::uint64_t belowThreshold = 0;    // nodes (with their subtrees) under the threshold
  std::uint64_t keptForImbalance = 0;  // shown only because one thread exceeds the threshold
  std::uint64_t beyondDepth = 0;       // nodes not expanded because of the depth limit
  std::uint64_t hidden = 0;            // removed by --hide / --keep
  std::uint64_t beyondTop = 0;         // procedures beyond --top
  std::uint64_t offHotPath = 0;        // siblings left out by --hot-path
  bool any() const { return belowThreshold || beyondDepth || hidden || beyondTop || offHotPath; }
};

struct TreeNode {
  std::uint32_t parent = kNoIndex;      // index into ViewTree::nodes
  std::vector<std::uint32_t> children;  // in display order
  unsigned depth = 0;
  NodeKind kind = NodeKind::Root;
  std::string name;  // procedure, inlined procedure, module, file or region; for a loop, call site or
                     // statement without a line its header address or instruction offset; else empty
  std::string file;
  std::uint32_t line = 0;
  std::string module;
  std::optional<std::uint32_t> cctNode;  // Calling Context view: the CCT node id
  // Id within this view, usable with --focus: the CCT node id, the Flat node, the region id;
  // in the Callers view stable for procedures only (caller chains are numbered as built).
  std::uint64_t viewId = 0;
  // Per column, finalized; NaN when undefined (see metrics::Statistics).
  std::vector<double> values;
  std::vector<std::uint64_t> instances;    // per column: CCT instances combined (1 in Calling Context)
  std::vector<metrics::Statistics> stats;  // per column, the full statistics behind values
  // Per column: the worst-case sampling error of the value (thesis App. A; NaN where none is
  // defined: ratios, formulas, real-valued metrics), and whether an imbalance value could be
  // produced by sampling alone.
  std::vector<double> errors;
  std::vector<char> withinSamplingError;
  bool imbalanceOnly = false;   // below the threshold, kept because one thread exceeds it
  double maxThreadPercent = 0;  // then: that thread's value, % of an average thread's total
  bool truncated = false;       // has children that are not shown
  std::string note;             // interpretEffort: the Fig. 5.1 reading of this context
};

struct ViewTree {
  ViewKind kind = ViewKind::CallingContext;
  std::vector<Column> columns;
  std::vector<std::string> units;  // per column, the metric's unit
  // Per column: the root's total (sum) and the average thread's total (all-population mean) of
  // the column's metric and scope, the bases of percentages.
  std::vector<double> rootSum, rootMean;
  std::vector<std::uint32_t> roots;  // top-level nodes shown (indices into nodes)
  std::vector<TreeNode> nodes;       // preorder
  PruneSummary pruned;
  std::uint64_t profiles = 0;  // N
  ThreadSelection threads;     // which threads N counts
  bool hasNotes = false;       // nodes carry notes (interpretEffort): renderers show them
  // What the user should be told beside the tree (the CLI prints them to stderr, "warning: ...");
  // no renderer prints them.
  std::vector<std::string> warnings;
  // Share of the root for column c of node n, NaN where no percentage makes sense.
  double percent(const TreeNode& node, std::size_t column) const;
};

// Builds, finalizes, prunes and sorts a view. Throws ViewError for a request that cannot be
// served and storage::DatabaseError for a damaged database.
ViewTree buildView(const storage::Database& db, const ViewRequest& request);
// Thesis Fig. 5.1 per shown node, from its inclusive sums of the idleness-accounting metrics
// (csp-run --idleness; docs/views.md, "Effort, idleness and overhead"): idleness is high when it
// is at least `highIdlenessPercent` of the context's effort (work + idleness), overhead when it
// is at least `highOverheadPercent` of its work. Notes: "effectively parallel" (low, low),
// "coarsen granularity" (low idleness, high overhead), "refine granularity" (high, low),
// "change the parallelization" (high, high); none where the context has no effort, and none on
// call sites and statements (they repeat their callee or scope). The tree must
// have columns of `work` and `idleness` in the inclusive scope (any statistic: the sums behind
// them are used); an `overhead` column is optional (absent: no overhead). Throws ViewError
// otherwise. With `idlenessMeasured` false (an OpenMP runtime ran without an OpenMP tool: the
// database property kOpenmpIdlenessProperty), every context with effort reads
// "idleness not measured" instead.
void interpretEffort(ViewTree& tree, double highIdlenessPercent, double highOverheadPercent,
                     bool idlenessMeasured = true);
// The note interpretEffort gives a context with these inclusive sums.
std::string effortNote(double work, double idleness, double overhead, double highIdlenessPercent,
                       double highOverheadPercent);

// The region metrics of a database (id = position): from its metadata, or for format 1.0
// databases, which did not describe them, the table csp-prof-mpi wrote then.
std::vector<storage::RegionMetricInfo> regionMetricsOf(const storage::Database& db);

// --- drill-down ---------------------------------------------------------------------------------
// A node given as a CCT id ("42") or as a call path of procedure names ("main/solve/axpy", each
// name a procedure called, possibly indirectly through loops and call sites, from the previous).
// Throws ViewError if nothing or more than one node matches.
storage::NodeId resolveNode(const storage::Database& db, const std::string& spec);

// What --node drills into: one CCT node, or several that a view combines (a procedure named
// anywhere in the tree, a Flat node, a Callers procedure): per thread, the exclusive values of
// every node and the inclusive values of the nodes marked (outermost instances), as the Flat and
// Callers views combine them.
struct DrillTarget {
  std::string label;  // "solve (solve.c:40)"
  std::string what;   // "CCT node 42", "flat node 7, 3 contexts combined"
  std::vector<storage::NodeId> nodes;
  std::vector<bool> inclusive;  // per node
};
// `spec`: a CCT node id, a call path of procedure names ("main/solve": each a procedure reached
// from the previous one; the first one anywhere in the tree if no root path starts with it), or
// a procedure name alone (all its contexts combined). With `kind` Flat or Callers a number is
// that view's node id (as it prints them). Throws ViewError if nothing matches.
DrillTarget resolveDrillTarget(const storage::Database& db, const std::string& spec,
                               ViewKind kind = ViewKind::CallingContext);

struct ThreadValue {
  storage::ProfileId profile = 0;
  std::string who;  // "rank 3 thread 1"
  double value = 0;
  std::string threadClass;  // main, worker, helper; "" before format 1.4
};

struct Distribution {
  storage::NodeId node = 0;
  std::string label;        // "solve (solve.c:40)"
  std::string what;         // which node(s): DrillTarget::what
  ThreadSelection threads;  // the threads shown and counted in N
  std::string metric, unit;
  storage::MetricScope scope = storage::MetricScope::Inclusive;
  std::uint64_t profiles = 0;       // N
  std::vector<ThreadValue> values;  // present profiles, by value descending
  // Over all N profiles (absent = 0) / present ones only. Percentiles are exact here (from the
  // values, nearest rank), not estimated from a histogram as in the tree views.
  metrics::Statistics all, present;
  std::vector<ThreadValue> outliers;     // |value - mean| > 3 stddev (all population), descending
  std::vector<char> outlierWithinError;  // per outlier: its distance to the mean is within sampling error
  double perThreadError = 0;             // sampling error of one thread's value (period - 1; NaN: none)
  struct Bin {
    double low = 0, high = 0;
    std::uint64_t count = 0;
  };
  std::vector<Bin> histogram;  // linear bins over [0, max]; absent profiles in bin 0
};

// Reads one node's per-thread values (the only place views read them).
Distribution drillDown(const storage::Database& db, storage::NodeId node, const std::string& metric,
                       storage::MetricScope scope, std::size_t bins = 16);
// The same for a target of one or several nodes, over the threads of a --threads selection.
Distribution drillDown(const storage::Database& db, const DrillTarget& target, const std::string& metric,
                       storage::MetricScope scope, std::size_t bins = 16, const std::string& threads = "all");

}  // namespace csp::views
