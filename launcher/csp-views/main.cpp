// csp-views: look at a CSP database in a terminal (docs/views.md). Argument parsing only; the
// views and renderers live in views/.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <utility>

#include "cli_numbers.hpp"
#include "csp/storage/database.hpp"
#include "csp/analysis/imbalance.hpp"
#include "csp/views/views.hpp"

namespace {

using csp::views::Column;
using csp::views::Statistic;
using csp::views::ViewError;
using csp::storage::MetricScope;

std::vector<std::string> splitList(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::stringstream in(v);
    std::string item;
    while (std::getline(in, item, ','))
      if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::optional<MetricScope> parseScope(const std::string& s) {
  if (s == "inclusive" || s == "I" || s == "i" || s == "incl") return MetricScope::Inclusive;
  if (s == "exclusive" || s == "E" || s == "e" || s == "excl") return MetricScope::Exclusive;
  return std::nullopt;
}

// "[metric:]statistic[:scope]" in any order of parts, defaults from the first column.
Column parseSortColumn(const std::string& spec, const Column& first, const std::vector<std::string>& metricNames) {
  Column c = first;
  std::stringstream in(spec);
  std::string part;
  while (std::getline(in, part, ':')) {
    if (auto s = csp::views::parseStatistic(part)) {
      c.statistic = *s;
    } else if (auto sc = parseScope(part)) {
      c.scope = *sc;
    } else if (std::find(metricNames.begin(), metricNames.end(), part) != metricNames.end()) {
      c.metric = part;
    } else {
      throw ViewError(fmt::format("--sort {}: '{}' is no metric, statistic (sum, mean, min, max, stddev, cfvar, "
                                  "imbalance, count) or scope (inclusive, exclusive)", spec, part));
    }
  }
  return c;
}

bool colorWanted(const std::string& mode) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  const char* term = std::getenv("TERM");
  return ::isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr && !(term && std::string(term) == "dumb");
}

// Parses `args`. An option with an optional value (--imbalance [SECTION], --hot-path [H]) takes
// the next word even when it is the database and more options follow (CLI11 keeps only as many
// words for the required DB as remain): then DB is missing, and the parse is done again with
// that word moved to the end, where it can only be the database.
void parseLeavingTheDatabase(CLI::App& app, std::vector<std::string> args, const std::string& db,
                             const std::vector<std::pair<std::string, std::string*>>& optional) {
  auto parse = [&](std::vector<std::string> a) {
    std::reverse(a.begin(), a.end());  // CLI11 takes them last first
    app.parse(a);
  };
  try {
    parse(args);
  } catch (const CLI::RequiredError&) {
    if (!db.empty()) throw;
    for (const auto& [name, value] : optional) {
      if (value->empty()) continue;
      for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == name && args[i + 1] == *value) {
          std::rotate(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.begin() + static_cast<std::ptrdiff_t>(i) + 2,
                      args.end());
          value->clear();
          return parse(args);
        }
    }
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "csp-views: Calling Context (default), Callers, Flat and Regions views of a CSP database.\n"
      "  csp-views DB                        top-down calling context tree\n"
      "  csp-views --flat --top 20 DB        the 20 hottest procedures\n"
      "  csp-views --callers DB              who calls what, bottom-up\n"
      "  csp-views --node main/solve DB      one node across all threads\n"
      "Reference: docs/views.md",
      "csp-views"};
  std::string dbPath, format = "text", color = "auto", population = "all", sort, nodeSpec, focus;
  bool callers = false, flat = false, regions = false, info = false, cc = false, noColor = false, fullNames = false;
  bool effort = false;
  std::string effortThresholds = "20,20";
  std::vector<std::string> metricArgs, statArgs, scopeArgs, hide, keep, formulas;
  std::optional<unsigned> depth;
  std::optional<double> threshold;
  std::optional<std::size_t> top;
  std::string hotPath;  // a number, checked after parsing: it may have taken the database (below)
  std::size_t bins = 16, nameWidth = 72;

  app.add_option("DB", dbPath, "the database directory")->required();
  auto* oCc = app.add_flag("--cc,--calling-context", cc, "Calling Context view (top-down; the default)");
  auto* oCallers = app.add_flag("--callers", callers, "Callers view (bottom-up; built lazily)");
  auto* oFlat = app.add_flag("--flat", flat, "Flat view (module, file, procedure, loop, line)");
  auto* oRegions = app.add_flag("--regions", regions, "Regions view (user-annotated regions)");
  auto* oInfo = app.add_flag("--info", info, "experiment metadata: command, processes, threads, metrics, skipped inputs");
  auto* oNode = app.add_option("--node", nodeSpec,
                               "per-thread distribution of a node: a CCT id, a procedure name (all its contexts), a call "
                               "path main/solve, or with --flat/--callers an id that view prints");
  std::string imbalanceSection;
  auto* oImbalance = app.add_option("--imbalance", imbalanceSection,
                                    "which contexts cause the load imbalance of a section (a CCT node id, a procedure "
                                    "name, or region:NAME for a region measured with --region-log; default: the whole "
                                    "program); text or json")
                         ->expected(0, 1);
  csp::analysis::ImbalanceOptions imbalance;
  app.add_option("--cluster-threshold", imbalance.clusterThreshold,
                 "--imbalance: list scopes whose own per-thread costs correlate at least this much with a cause's as "
                 "further sites of it")
      ->check(csp::cli::finiteRange(0, 1))
      ->capture_default_str();
  app.add_option("--min-share", imbalance.minShare, "--imbalance: report causes explaining at least this share of the variance")
      ->check(csp::cli::finiteRange(0, 1))
      ->capture_default_str();
  app.add_option("--min-imbalance", imbalance.minImbalance,
                 "--imbalance: a section whose max/mean is below 1 + this is balanced enough and not analysed")
      ->check(csp::cli::finiteRange(0, 1e9))
      ->capture_default_str();
  const std::vector<CLI::Option*> views{oCc, oCallers, oFlat, oRegions, oInfo, oImbalance};
  for (auto* a : views)
    for (auto* b : views)
      if (a != b) a->excludes(b);
  // --node picks its id space with --flat or --callers (the ids those views print).
  for (auto* v : {oCc, oRegions, oInfo, oImbalance}) oNode->excludes(v);

  app.add_option("-m,--metric", metricArgs, "metrics to show (repeat or comma-separate; default: the first)");
  app.add_option("-s,--stat", statArgs,
                 "statistics: sum mean min max stddev cfvar imbalance count p5 p25 p50 p75 p95 imbmedian (default sum)");
  std::string threads;
  app.add_option("--threads", threads,
                 "threads the statistics are over: all, work (main + worker), or classes main,worker,helper "
                 "(default: work when the database has helper threads, else all)");
  app.add_option("--scope", scopeArgs, "scopes: inclusive, exclusive (default both; --node: inclusive)");
  app.add_option("--population", population, "all (absent threads count as 0) or present")
      ->check(CLI::IsMember({"all", "present"}))
      ->capture_default_str();
  app.add_option("--formula", formulas,
                 "'NAME = EXPR' over finalized statistics, a column per scope (e.g. 'cpi = cycles.sum / "
                 "instructions.sum'; docs/metrics.md); repeatable")
      ->allow_extra_args(false);
  app.add_flag("--effort", effort,
               "effort, work, idleness and overhead per context with the thesis' Fig. 5.1 reading (csp-run "
               "--idleness; docs/views.md)");
  app.add_option("--effort-thresholds", effortThresholds,
                 "IDLE,OVERHEAD: idleness is high at IDLE % of effort, overhead at OVERHEAD % of work")
      ->capture_default_str();
  app.add_option("--sort", sort, "sort by a column [metric:]stat[:scope], or 'name'");
  app.add_option("-d,--depth", depth, "levels shown below the top (callers default: 2)");
  app.add_option("-t,--threshold", threshold, "hide nodes below this % of the root unless one thread exceeds it (default 1; 0 shows all)")
      ->check(csp::cli::finiteRange(0, 100));
  auto* oHot = app.add_option("--hot-path", hotPath, "follow the hottest child while it holds >= H % of its parent")
                   ->expected(0, 1)
                   ->default_str("50");
  app.add_option("--focus", focus, "re-root at a node id or at the nodes of this name");
  app.add_option("--hide", hide, "hide nodes (and their subtrees) whose name matches a glob or substring");
  app.add_option("--keep", keep, "show only nodes matching, their callers/ancestors and their subtrees");
  app.add_option("--top", top, "flat/callers: only the N hottest procedures");
  app.add_option("--format", format, "text, csv, json, folded or speedscope")
      ->check(CLI::IsMember({"text", "csv", "json", "folded", "speedscope"}))
      ->capture_default_str();
  app.add_option("--color", color, "auto, always or never")->check(CLI::IsMember({"auto", "always", "never"}));
  app.add_flag("--no-color", noColor, "no colour (also: NO_COLOR set, or output is no terminal)");
  app.add_flag("--full-names", fullNames, "do not shorten long procedure names");
  bool bounds = false;
  app.add_flag("--bounds", bounds, "text: show each value's worst-case sampling error (±; thesis App. A)");
  app.add_option("--name-width", nameWidth, "shorten names to this many characters")->capture_default_str();
  app.add_option("--bins", bins, "--node: histogram bins")->check(CLI::Range(1, 200))->capture_default_str();

  try {
    parseLeavingTheDatabase(app, {argv + 1, argv + argc}, dbPath, {{"--imbalance", &imbalanceSection}, {"--hot-path", &hotPath}});
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "csp-views: " << e.what() << " (csp-views --help shows the options)\n";
    return 2;
  }
  if (const auto bad = hotPath.empty() ? std::string() : csp::cli::finiteRangeError(hotPath, 0, 100); !bad.empty()) {
    std::cerr << "csp-views: --hot-path: " << bad << " (csp-views --help shows the options)\n";
    return 2;
  }

  try {
    if (noColor) color = "never";
    csp::views::TextOptions text{colorWanted(color), bounds, fullNames, nameWidth};
    const auto db = csp::storage::Database::open(dbPath);

    const auto metricNames = splitList(metricArgs);
    const auto statNames = splitList(statArgs);
    const auto scopeNames = splitList(scopeArgs);
    std::vector<Statistic> stats;
    for (const auto& s : statNames) {
      auto st = csp::views::parseStatistic(s);
      if (!st)
        throw ViewError(fmt::format("unknown statistic '{}' (sum, mean, min, max, stddev, cfvar, imbalance, count, p5, p25, "
                                    "p50, p75, p95, imbmedian)",
                                    s));
      stats.push_back(*st);
    }
    std::vector<MetricScope> scopes;
    for (const auto& s : scopeNames) {
      auto sc = parseScope(s);
      if (!sc) throw ViewError(fmt::format("unknown scope '{}' (inclusive or exclusive)", s));
      scopes.push_back(*sc);
    }

    if (info) {
      if (format == "json")
        csp::views::renderInfoJson(*db, std::cout);
      else if (format == "text")
        csp::views::renderInfoText(*db, std::cout);
      else
        throw ViewError("--info is available as text or json");
      return 0;
    }

    if (oImbalance->count() > 0) {
      if (format != "text" && format != "json") throw ViewError("--imbalance is available as text or json");
      if (metricNames.size() > 1) throw ViewError("--imbalance analyses one metric");
      imbalance.section = imbalanceSection;
      imbalance.metric = metricNames.empty() ? "" : metricNames[0];
      imbalance.threads = threads;
      csp::analysis::ImbalanceReport report;
      try {
        report = csp::analysis::analyzeImbalance(*db, imbalance);
      } catch (const std::invalid_argument& e) {
        throw ViewError(std::string("--imbalance: ") + e.what());
      }
      if (format == "json")
        csp::analysis::renderImbalanceJson(report, std::cout);
      else
        csp::analysis::renderImbalanceText(report, std::cout);
      return 0;
    }

    if (!nodeSpec.empty()) {
      if (format == "folded" || format == "speedscope") throw ViewError("--node is available as text, csv or json");
      if (metricNames.size() > 1 || scopes.size() > 1) throw ViewError("--node shows one metric in one scope");
      if (regions) throw ViewError("--node drills into the calling context, flat or callers view, not --regions");
      const auto target = csp::views::resolveDrillTarget(
          *db, nodeSpec, callers ? csp::views::ViewKind::Callers : flat ? csp::views::ViewKind::Flat : csp::views::ViewKind::CallingContext);
      const std::string metric = metricNames.empty() ? db->metrics().at(0).descriptor.name : metricNames[0];
      const auto d = csp::views::drillDown(*db, target, metric, scopes.empty() ? MetricScope::Inclusive : scopes[0], bins,
                                           threads);
      if (format == "csv")
        csp::views::renderDistributionCsv(d, std::cout);
      else if (format == "json")
        csp::views::renderDistributionJson(d, std::cout);
      else
        csp::views::renderDistributionText(d, std::cout, text);
      return 0;
    }

    csp::views::ViewRequest request;
    request.kind = callers ? csp::views::ViewKind::Callers
                   : flat  ? csp::views::ViewKind::Flat
                   : regions ? csp::views::ViewKind::Regions
                             : csp::views::ViewKind::CallingContext;
    std::vector<std::string> available;
    if (regions) {
      available = {"time"};  // the default column
      for (const auto& m : csp::views::regionMetricsOf(*db))
        if (m.name != "time") available.push_back(m.name);
    }
    else
      for (const auto& m : db->metrics()) available.push_back(m.descriptor.name);
    double highIdleness = 20, highOverhead = 20;
    std::vector<std::string> effortMetrics;  // --effort: the idleness-accounting metrics present
    if (effort) {
      if (regions) throw ViewError("--effort applies to the calling context, callers and flat views");
      const auto parts = splitList({effortThresholds});
      const auto idle = parts.size() == 2 ? csp::cli::parseFinite(parts[0]) : std::nullopt;
      const auto over = parts.size() == 2 ? csp::cli::parseFinite(parts[1]) : std::nullopt;
      if (!idle || !over || *idle < 0 || *idle > 100 || *over < 0 || *over > 100)
        throw ViewError(fmt::format("--effort-thresholds {}: expected IDLE,OVERHEAD (finite percentages from 0 to 100)",
                                    effortThresholds));
      highIdleness = *idle;
      highOverhead = *over;
      for (const char* m : {"effort", "work", "idleness", "overhead"})
        if (std::find(available.begin(), available.end(), m) != available.end()) effortMetrics.push_back(m);
      if (std::find(effortMetrics.begin(), effortMetrics.end(), "work") == effortMetrics.end() ||
          std::find(effortMetrics.begin(), effortMetrics.end(), "idleness") == effortMetrics.end())
        throw ViewError("--effort needs the metrics work and idleness: measure with csp-run --idleness");
    }
    const auto shownMetrics = !metricNames.empty() ? metricNames
                              : effort             ? effortMetrics
                                                   : std::vector<std::string>{available.at(0)};
    if (stats.empty()) stats = {Statistic::Sum};
    // The Flat view answers "which code costs itself the most" (perf's and pprof's first view):
    // self cost first, and sorted and pruned by it.
    if (scopes.empty()) scopes = effort ? std::vector<MetricScope>{MetricScope::Inclusive}
                                 : flat ? std::vector<MetricScope>{MetricScope::Exclusive, MetricScope::Inclusive}
                                        : std::vector<MetricScope>{MetricScope::Inclusive, MetricScope::Exclusive};
    for (const auto& m : shownMetrics)
      for (auto st : stats)
        for (auto sc : scopes) request.columns.push_back({m, st, sc});
    if (effort) {
      // The reading needs the inclusive sums of work, idleness and overhead.
      for (const auto& m : effortMetrics) {
        if (m == "effort") continue;
        const bool have = std::any_of(request.columns.begin(), request.columns.end(), [&](const Column& c) {
          return c.metric == m && c.scope == MetricScope::Inclusive && c.formula.empty();
        });
        if (!have) request.columns.push_back({m, Statistic::Sum, MetricScope::Inclusive});
      }
      if (metricNames.empty() && formulas.empty()) {
        const bool haveEffort = std::find(effortMetrics.begin(), effortMetrics.end(), "effort") != effortMetrics.end();
        formulas.push_back(haveEffort ? "idleness_pct = 100 * idleness.sum / effort.sum"
                                      : "idleness_pct = 100 * idleness.sum / (work.sum + idleness.sum)");
        if (std::find(effortMetrics.begin(), effortMetrics.end(), "overhead") != effortMetrics.end())
          formulas.push_back("overhead_pct = 100 * overhead.sum / work.sum");
      }
    }
    if (regions && !formulas.empty()) throw ViewError("--formula applies to the calling context, callers and flat views");
    for (const auto& f : formulas) {
      const auto eq = f.find('=');
      std::string name = f.substr(0, eq == std::string::npos ? 0 : eq);
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      for (auto sc : scopes) request.columns.push_back({name, Statistic::Sum, sc, f});
      if (!name.empty()) available.push_back(name);
    }
    request.population = population == "present" ? csp::metrics::Population::Present : csp::metrics::Population::All;
    if (sort == "name")
      request.sortByName = true;
    else if (!sort.empty()) {
      request.sortBy = parseSortColumn(sort, request.columns.front(), available);
      // Sorting by a formula: its column of the chosen scope.
      for (const auto& c : request.columns)
        if (!c.formula.empty() && c.metric == request.sortBy->metric && c.scope == request.sortBy->scope) request.sortBy = c;
    }
    request.depth = depth;
    if (!depth && callers) request.depth = 2;
    if (threshold) request.thresholdPercent = *threshold;
    if (oHot->count() > 0) request.hotPathPercent = hotPath.empty() ? 50.0 : *csp::cli::parseFinite(hotPath);
    request.focus = focus;
    request.hide = hide;
    request.keep = keep;
    request.top = top;
    request.threads = threads;
    if (request.top && *request.top == 0) throw ViewError("--top needs a positive number");

    auto tree = csp::views::buildView(*db, request);
    if (effort) {
      bool idlenessMeasured = true;
      for (const auto& p : db->metadata().properties)
        if (p.key == csp::storage::kOpenmpIdlenessProperty) {
          std::cerr << "csp-views: warning: OpenMP idleness " << p.value << "; --effort draws no conclusions\n";
          idlenessMeasured = false;
        }
      csp::views::interpretEffort(tree, highIdleness, highOverhead, idlenessMeasured);
    }
    if (format == "csv")
      csp::views::renderCsv(tree, std::cout);
    else if (format == "json")
      csp::views::renderJson(tree, std::cout);
    else if (format == "folded")
      csp::views::renderFolded(tree, std::cout);
    else if (format == "speedscope")
      csp::views::renderSpeedscope(tree, std::cout, db->metadata().executable.empty() ? dbPath : db->metadata().executable);
    else
      csp::views::renderText(tree, std::cout, text);
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "csp-views: error: writing the output failed\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "csp-views: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
