// csp-views: look at a CSP database in a terminal (docs/views.md). Argument parsing only: the
// requests, their defaults and checks, the answers and the renderers live in views/.
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "cli_numbers.hpp"
#include "cli_parse.hpp"
#include "csp/views/memory.hpp"
#include "csp/views/render.hpp"
#include "csp/views/request.hpp"
#include "csp/views/session.hpp"

namespace {

using csp::views::ViewKind;

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
          std::rotate(args.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                      args.begin() + static_cast<std::ptrdiff_t>(i) + 2, args.end());
          value->clear();
          return parse(args);
        }
    }
    throw;
  }
}

// The view the flags name (they exclude each other).
ViewKind kindOf(bool callers, bool flat, bool regions) {
  return callers ? ViewKind::Callers : flat ? ViewKind::Flat : regions ? ViewKind::Regions : ViewKind::CallingContext;
}

void printWarnings(const csp::views::Answer& answer) {
  if (const auto* tree = std::get_if<csp::views::ViewTree>(&answer))
    for (const auto& w : tree->warnings) std::cerr << "csp-views: warning: " << w << "\n";
}

struct MemoryRequest {
  std::string cost, size = "trms", costMetric = "instructions";
  bool growth = false, footprint = false, interleaving = false;
  std::size_t minSizes = 4;
  bool wanted() const { return !cost.empty() || growth || footprint || interleaving; }
};

// --cost, --growth, --footprint, --interleaving: the memory-profile answers, outside the view session.
int runMemory(const std::string& dbPath, const MemoryRequest& r, csp::views::Format format) {
  namespace mm = csp::metrics::memory;
  csp::views::MemoryRequest request;
  request.cost = r.cost;
  request.growth = r.growth, request.footprint = r.footprint, request.interleaving = r.interleaving;
  request.size = r.size == "rms" ? mm::SizeKind::Rms : mm::SizeKind::Trms;
  request.costMetric = r.costMetric == "time" ? mm::CostMetric::Time : mm::CostMetric::Instructions;
  request.minSizes = r.minSizes;
  if (static_cast<int>(!r.cost.empty()) + static_cast<int>(r.growth) + static_cast<int>(r.footprint) +
          static_cast<int>(r.interleaving) >
      1) {
    std::cerr << "csp-views: error: --cost, --growth, --footprint and --interleaving are separate answers: give one\n";
    return 2;
  }
  try {
    const auto db = csp::storage::Database::open(dbPath);
    csp::views::renderMemory(*db, request, format, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "csp-views: error: " << e.what() << "\n";
    return 1;
  }
  std::cout.flush();
  return std::cout ? 0 : 1;
}

// --cost, --growth, --footprint, --interleaving and their settings.
void addMemoryOptions(CLI::App& app, MemoryRequest& memory) {
  app.add_option("--cost", memory.cost,
                 "memory profiles (csp-run --memory): the cost function of a routine, worst and mean cost per input "
                 "size with fitted growth (docs/memory-profiles.md)");
  app.add_flag("--growth", memory.growth,
               "memory profiles: routines ranked by the fitted growth exponent of their cost");
  app.add_flag("--footprint", memory.footprint, "memory profiles: the all-window footprint curves (0/5/50/95/100 %)");
  app.add_flag(
      "--interleaving", memory.interleaving,
      "memory profiles: the all-window interleaving curves of the main thread and the first thread it started");
  app.add_option("--size", memory.size, "--cost, --growth: the input size, trms (default) or rms")
      ->check(CLI::IsMember({"trms", "rms"}));
  app.add_option("--cost-metric", memory.costMetric,
                 "--cost, --growth: the cost of an activation, instructions (default, exact) or time (thread CPU "
                 "time under the tool)")
      ->check(CLI::IsMember({"instructions", "time"}));
  app.add_option("--min-sizes", memory.minSizes, "--growth: routines with at least this many input sizes")
      ->check(CLI::Range(3, 1000))
      ->capture_default_str();
}

// The settings of --imbalance.
void addImbalanceOptions(CLI::App& app, csp::analysis::ImbalanceOptions& imbalance) {
  app.add_option("--cluster-threshold", imbalance.clusterThreshold,
                 "--imbalance: list scopes whose own per-thread costs correlate at least this much with a cause's as "
                 "further sites of it")
      ->check(csp::cli::finiteRange(0, 1))
      ->capture_default_str();
  app.add_option("--min-share", imbalance.minShare,
                 "--imbalance: report causes explaining at least this share of the variance")
      ->check(csp::cli::finiteRange(0, 1))
      ->capture_default_str();
  app.add_option("--min-imbalance", imbalance.minImbalance,
                 "--imbalance: a section whose max/mean is below 1 + this is balanced enough and not analysed")
      ->check(csp::cli::finiteRange(0, 1e9))
      ->capture_default_str();
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
  csp::views::ViewOptions o;
  std::string dbPath, format = "text", color = "auto";
  bool callers = false, flat = false, regions = false, cc = false, noColor = false, fullNames = false;
  std::string hotPath;  // a number, checked after parsing: it may have taken the database (below)
  std::size_t nameWidth = 72;

  app.add_option("DB", dbPath, "the database directory")->required();
  auto* oCc = app.add_flag("--cc,--calling-context", cc, "Calling Context view (top-down; the default)");
  auto* oCallers = app.add_flag("--callers", callers, "Callers view (bottom-up; built lazily)");
  auto* oFlat = app.add_flag("--flat", flat, "Flat view (module, file, procedure, loop, line)");
  auto* oRegions = app.add_flag("--regions", regions, "Regions view (user-annotated regions)");
  auto* oInfo =
      app.add_flag("--info", o.info, "experiment metadata: command, processes, threads, metrics, skipped inputs");
  auto* oNode =
      app.add_option("--node", o.node,
                     "per-thread distribution of a node: a CCT id, a procedure name (all its contexts), a call "
                     "path main/solve, or with --flat/--callers an id that view prints");
  std::string imbalanceSection;
  auto* oImbalance = app.add_option("--imbalance", imbalanceSection,
                                    "which contexts cause the load imbalance of a section (a CCT node id, a procedure "
                                    "name, or region:NAME for a region measured with --region-log; default: the whole "
                                    "program); text or json")
                         ->expected(0, 1);
  addImbalanceOptions(app, o.imbalanceOptions);
  const std::vector<CLI::Option*> views{oCc, oCallers, oFlat, oRegions, oInfo, oImbalance};
  for (auto* a : views)
    for (auto* b : views)
      if (a != b) a->excludes(b);
  // --node picks its id space with --flat or --callers (the ids those views print).
  for (auto* v : {oCc, oRegions, oInfo, oImbalance}) oNode->excludes(v);

  app.add_option("-m,--metric", o.metrics, "metrics to show (repeat or comma-separate; default: the first)");
  app.add_option(
      "-s,--stat", o.statistics,
      "statistics: sum mean min max stddev cfvar imbalance count p5 p25 p50 p75 p95 imbmedian (default sum)");
  app.add_option("--threads", o.threads,
                 "threads the statistics are over: all, work (main + worker), or classes main,worker,helper "
                 "(default: work when the database has helper threads, else all)");
  app.add_option("--scope", o.scopes, "scopes: inclusive, exclusive (default both; --node: inclusive)");
  app.add_option("--population", o.population, "all (absent threads count as 0) or present")
      ->check(CLI::IsMember({"all", "present"}))
      ->capture_default_str();
  app.add_option("--formula", o.formulas,
                 "'NAME = EXPR' over finalized statistics, a column per scope (e.g. 'cpi = cycles.sum / "
                 "instructions.sum'; docs/metrics.md); repeatable")
      ->allow_extra_args(false);
  app.add_flag("--effort", o.effort,
               "effort, work, idleness and overhead per context with the thesis' Fig. 5.1 reading (csp-run "
               "--idleness; docs/views.md)");
  app.add_option("--effort-thresholds", o.effortThresholds,
                 "IDLE,OVERHEAD: idleness is high at IDLE % of effort, overhead at OVERHEAD % of work")
      ->capture_default_str();
  app.add_option("--sort", o.sort, "sort by a column [metric:]stat[:scope], or 'name'");
  app.add_option("-d,--depth", o.depth, "levels shown below the top (callers default: 2)");
  app.add_option("-t,--threshold", o.threshold,
                 "hide nodes below this % of the root unless one thread exceeds it (default 1; 0 shows all)")
      ->check(csp::cli::finiteRange(0, 100));
  auto* oHot = app.add_option("--hot-path", hotPath, "follow the hottest child while it holds >= H % of its parent")
                   ->expected(0, 1)
                   ->default_str("50");
  app.add_option("--focus", o.focus, "re-root at a node id or at the nodes of this name");
  app.add_option("--hide", o.hide, "hide nodes (and their subtrees) whose name matches a glob or substring");
  app.add_option("--keep", o.keep, "show only nodes matching, their callers/ancestors and their subtrees");
  app.add_option("--top", o.top, "flat/callers: only the N hottest procedures");
  app.add_option("--format", format, "text, csv, json, folded or speedscope")
      ->check(CLI::IsMember({"text", "csv", "json", "folded", "speedscope"}))
      ->capture_default_str();
  app.add_option("--color", color, "auto, always or never")->check(CLI::IsMember({"auto", "always", "never"}));
  app.add_flag("--no-color", noColor, "no colour (also: NO_COLOR set, or output is no terminal)");
  app.add_flag("--full-names", fullNames, "do not shorten long procedure names");
  bool bounds = false;
  app.add_flag("--bounds", bounds, "text: show each value's worst-case sampling error (±; thesis App. A)");
  app.add_option("--name-width", nameWidth, "shorten names to this many characters")->capture_default_str();
  app.add_option("--bins", o.bins, "--node: histogram bins")->check(CLI::Range(1, 200))->capture_default_str();
  MemoryRequest memory;
  addMemoryOptions(app, memory);

  if (const auto exit = csp::cli::parseOrExit(app, "csp-views", [&] {
        parseLeavingTheDatabase(app, {argv + 1, argv + argc}, dbPath,
                                {{"--imbalance", &imbalanceSection}, {"--hot-path", &hotPath}});
      }))
    return *exit;
  if (const auto bad = hotPath.empty() ? std::string() : csp::cli::finiteRangeError(hotPath, 0, 100); !bad.empty()) {
    std::cerr << "csp-views: --hot-path: " << bad << " (csp-views --help shows the options)\n";
    return 2;
  }
  o.kind = kindOf(callers, flat, regions);
  if (oImbalance->count() > 0) o.imbalance = imbalanceSection;
  if (oHot->count() > 0) o.hotPath = hotPath.empty() ? 50.0 : *csp::cli::parseFinite(hotPath);
  o.format = *csp::views::parseFormat(format);

  if (memory.wanted()) return runMemory(dbPath, memory, *csp::views::parseFormat(format));
  try {
    if (noColor) color = "never";
    const csp::views::TextOptions text{colorWanted(color), bounds, fullNames, nameWidth};
    csp::views::Session session(dbPath);
    const auto answer = session.answer(csp::views::requestFrom(session.database(), o));
    printWarnings(answer);
    csp::views::render(answer, o.format, std::cout, text, session.title());
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
