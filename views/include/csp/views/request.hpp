// Requests of the presentation layer, built from what a user asked for. A tool's front end (the
// CLIs, a web server) only turns its input into options; the defaults, the columns and every
// check of a combination are made here, once for every front end (docs/views.md, docs/query.md).
//
//   ViewOptions o;                      // csp-views' options, as given
//   o.kind = ViewKind::Flat;
//   Session session(dir);
//   Request r = requestFrom(session.database(), o);   // ViewError: one line for the user
//   Answer a = session.answer(r);                       // session.hpp
//   render(a, Format::Text, std::cout);                 // render.hpp
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "csp/analysis/imbalance.hpp"
#include "csp/analysis/query.hpp"
#include "csp/views/views.hpp"

namespace csp::views {

enum class Format : std::uint8_t { Text, Csv, Json, Folded, Speedscope };
// "text", "csv", "json", "folded", "speedscope"; none for anything else.
std::optional<Format> parseFormat(const std::string& name);

// csp-views' options before any check: words as the user gave them (lists may be repeated or
// comma-separated), numbers already parsed.
struct ViewOptions {
  ViewKind kind = ViewKind::CallingContext;
  bool info = false;                            // --info
  std::optional<std::string> imbalance;         // --imbalance [SECTION] ("": the whole program)
  analysis::ImbalanceOptions imbalanceOptions;  // its thresholds (section, metric, threads set here)
  std::string node;                             // --node SPEC ("": none)
  std::size_t bins = 16;                        // --node: histogram bins
  std::vector<std::string> metrics, statistics, scopes, formulas, hide, keep;
  std::string population = "all";  // all, present
  std::string sort;                // [metric:]stat[:scope], or "name"
  std::string focus, threads;
  bool effort = false;
  std::string effortThresholds = "20,20";  // IDLE,OVERHEAD
  std::optional<unsigned> depth;
  std::optional<double> threshold;
  std::optional<double> hotPath;  // --hot-path H
  std::optional<std::size_t> top;
  Format format = Format::Text;  // only to refuse what an answer cannot be shown as
};

// The thesis' Fig. 5.1 reading of every context (--effort): idleness is high at this % of
// effort, overhead at this % of work.
struct EffortReading {
  double highIdlenessPercent = 20, highOverheadPercent = 20;
};

struct TreeRequest {  // a view
  ViewRequest view;
  std::optional<EffortReading> effort;
};
struct NodeRequest {                         // one node (or a procedure's contexts) per thread
  std::string spec;                          // resolveDrillTarget
  ViewKind kind = ViewKind::CallingContext;  // whose node ids a number is
  std::string metric;
  storage::MetricScope scope = storage::MetricScope::Inclusive;
  std::size_t bins = 16;
  std::string threads;
};
struct InfoRequest {};
struct ImbalanceRequest {
  analysis::ImbalanceOptions options;
};
using Request = std::variant<TreeRequest, NodeRequest, InfoRequest, ImbalanceRequest>;

// The request of csp-views' options over `db` (whose metrics name the default columns). Throws
// ViewError for an unknown statistic or scope, a combination that cannot be served and a format
// the answer has not, in the order csp-views has always checked them.
Request requestFrom(const storage::Database& db, const ViewOptions& options);

// csp-query's options: a query, or a canned analysis with its arguments (`query` then holds the
// first of them, as on the command line).
struct QueryOptions {
  std::string query;
  std::string canned;
  std::vector<std::string> cannedArgs;
  std::size_t limit = 50;       // frames shown per binding of a query without measure
  bool global = false;          // frames across all processes (docs/query.md "Across processes")
  std::string whatIf = {};      // "REGION=-20%": dCOZ's predicted speed-up instead of a query
  std::string whatIfRank = {};  // "-20%": every region's predicted speed-up for that reduction
  bool mpiWaits = false;        // late senders and receivers, collective waits and stragglers per rank
};
struct QueryRequest {
  std::shared_ptr<const analysis::Query> query;  // null: the canned analysis, or a what-if
  std::string canned;
  std::vector<std::string> cannedArgs;
  std::size_t limit = 50;
  bool global = false;
  std::string whatIfRegion = {};  // a what-if when not empty
  bool whatIfAll = false;         // the ranking of every region (--what-if-rank)
  bool mpiWaits = false;
  double whatIfReduction = 0;  // 0 < r <= 1
};
// Parses the query: analysis::QueryError (with its column) for one that does not parse; a bad
// --what-if or --what-if-rank, or one combined with a query: ViewError.
QueryRequest queryRequestFrom(const QueryOptions& options);

// A window of the region timeline (Session::timeline): times in ns since each process's first
// event, as csp-query's frames.
struct TimelineRequest {
  std::uint64_t fromNs = 0;
  std::optional<std::uint64_t> toNs;  // none: the end of the longest process
  std::size_t pixels = 1000;          // visits shorter than (to - from) / pixels are merged
  std::size_t maxProcesses = 16;      // the first processes (ascending ids) shown
  std::optional<QueryRequest> query;  // its frames are highlighted (a frames query: no measure)
};

}  // namespace csp::views
