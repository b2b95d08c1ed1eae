// csp-views' options as requests (request.hpp): defaults, columns and checks, in the order the
// tool has always made them (its messages are part of its interface: tests/views).
#include "csp/views/request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace csp::views {

using storage::MetricScope;

std::optional<Format> parseFormat(const std::string& name) {
  if (name == "text") return Format::Text;
  if (name == "csv") return Format::Csv;
  if (name == "json") return Format::Json;
  if (name == "folded") return Format::Folded;
  if (name == "speedscope") return Format::Speedscope;
  return std::nullopt;
}

namespace {

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

// A percentage from 0 to 100 as the whole text (no NaN, no infinity).
std::optional<double> parsePercentage(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0 || v > 100) return std::nullopt;
  return v;
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// "[metric:]statistic[:scope]" in any order of parts, defaults from the first column.
Column parseSortColumn(const std::string& spec, const Column& first, const std::vector<std::string>& metricNames) {
  Column c = first;
  std::stringstream in(spec);
  std::string part;
  while (std::getline(in, part, ':')) {
    if (auto s = parseStatistic(part)) {
      c.statistic = *s;
    } else if (auto sc = parseScope(part)) {
      c.scope = *sc;
    } else if (contains(metricNames, part)) {
      c.metric = part;
    } else {
      throw ViewError(
          fmt::format("--sort {}: '{}' is no metric, statistic (sum, mean, min, max, stddev, cfvar, "
                      "imbalance, count) or scope (inclusive, exclusive)",
                      spec, part));
    }
  }
  return c;
}

// What every request reads of the options: metrics, statistics and scopes, checked.
struct Selection {
  std::vector<std::string> metrics, formulas;
  std::vector<Statistic> statistics;
  std::vector<MetricScope> scopes;
};

Selection selectionOf(const ViewOptions& o) {
  Selection s;
  s.metrics = splitList(o.metrics);
  s.formulas = o.formulas;
  for (const auto& name : splitList(o.statistics)) {
    auto st = parseStatistic(name);
    if (!st)
      throw ViewError(
          fmt::format("unknown statistic '{}' (sum, mean, min, max, stddev, cfvar, imbalance, count, p5, p25, "
                      "p50, p75, p95, imbmedian)",
                      name));
    s.statistics.push_back(*st);
  }
  for (const auto& name : splitList(o.scopes)) {
    auto sc = parseScope(name);
    if (!sc) throw ViewError(fmt::format("unknown scope '{}' (inclusive or exclusive)", name));
    s.scopes.push_back(*sc);
  }
  return s;
}

InfoRequest infoRequest(const ViewOptions& o) {
  if (o.format != Format::Json && o.format != Format::Text) throw ViewError("--info is available as text or json");
  return {};
}

ImbalanceRequest imbalanceRequest(const ViewOptions& o, const Selection& s) {
  if (o.format != Format::Text && o.format != Format::Json) throw ViewError("--imbalance is available as text or json");
  if (s.metrics.size() > 1) throw ViewError("--imbalance analyses one metric");
  ImbalanceRequest r{o.imbalanceOptions};
  r.options.section = *o.imbalance;
  r.options.metric = s.metrics.empty() ? "" : s.metrics[0];
  r.options.threads = o.threads;
  return r;
}

NodeRequest nodeRequest(const storage::Database& db, const ViewOptions& o, const Selection& s) {
  if (o.format == Format::Folded || o.format == Format::Speedscope)
    throw ViewError("--node is available as text, csv or json");
  if (s.metrics.size() > 1 || s.scopes.size() > 1) throw ViewError("--node shows one metric in one scope");
  if (o.kind == ViewKind::Regions)
    throw ViewError("--node drills into the calling context, flat or callers view, not --regions");
  NodeRequest r;
  r.spec = o.node;
  r.kind = o.kind;
  r.metric = s.metrics.empty() ? db.metrics().at(0).descriptor.name : s.metrics[0];
  r.scope = s.scopes.empty() ? MetricScope::Inclusive : s.scopes[0];
  r.bins = o.bins;
  r.threads = o.threads;
  return r;
}

// The metrics a view can show: the database's, or the region metrics with the default first.
std::vector<std::string> availableMetrics(const storage::Database& db, ViewKind kind) {
  std::vector<std::string> available;
  if (kind != ViewKind::Regions) {
    for (const auto& m : db.metrics()) available.push_back(m.descriptor.name);
    return available;
  }
  available = {"time"};  // the default column
  for (const auto& m : regionMetricsOf(db))
    if (m.name != "time") available.push_back(m.name);
  return available;
}

// --effort: its thresholds, and the idleness-accounting metrics the database has.
EffortReading effortReading(const ViewOptions& o, const std::vector<std::string>& available,
                            std::vector<std::string>& effortMetrics) {
  if (o.kind == ViewKind::Regions) throw ViewError("--effort applies to the calling context, callers and flat views");
  const auto parts = splitList({o.effortThresholds});
  const auto idle = parts.size() == 2 ? parsePercentage(parts[0]) : std::nullopt;
  const auto over = parts.size() == 2 ? parsePercentage(parts[1]) : std::nullopt;
  if (!idle || !over)
    throw ViewError(fmt::format("--effort-thresholds {}: expected IDLE,OVERHEAD (finite percentages from 0 to 100)",
                                o.effortThresholds));
  for (const char* m : {"effort", "work", "idleness", "overhead"})
    if (contains(available, m)) effortMetrics.push_back(m);
  if (!contains(effortMetrics, "work") || !contains(effortMetrics, "idleness"))
    throw ViewError("--effort needs the metrics work and idleness: measure with csp-run --idleness");
  return {*idle, *over};
}

// The reading needs the inclusive sums of work, idleness and overhead; without chosen metrics it
// shows the idleness (and overhead) as percentages.
void addEffortColumns(const std::vector<std::string>& effortMetrics, Selection& s, std::vector<Column>& columns) {
  for (const auto& m : effortMetrics) {
    if (m == "effort") continue;
    const bool have = std::any_of(columns.begin(), columns.end(), [&](const Column& c) {
      return c.metric == m && c.scope == MetricScope::Inclusive && c.formula.empty();
    });
    if (!have) columns.push_back({m, Statistic::Sum, MetricScope::Inclusive});
  }
  if (!s.metrics.empty() || !s.formulas.empty()) return;
  s.formulas.push_back(contains(effortMetrics, "effort")
                           ? "idleness_pct = 100 * idleness.sum / effort.sum"
                           : "idleness_pct = 100 * idleness.sum / (work.sum + idleness.sum)");
  if (contains(effortMetrics, "overhead")) s.formulas.push_back("overhead_pct = 100 * overhead.sum / work.sum");
}

// A column per scope of every formula; its name joins the metrics --sort may name.
void addFormulaColumns(const Selection& s, std::vector<std::string>& available, std::vector<Column>& columns) {
  for (const auto& f : s.formulas) {
    const auto eq = f.find('=');
    std::string name = f.substr(0, eq == std::string::npos ? 0 : eq);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    for (auto sc : s.scopes) columns.push_back({name, Statistic::Sum, sc, f});
    if (!name.empty()) available.push_back(name);
  }
}

// Ordering and navigation: sort, depth (callers: 2), threshold, hot path, focus, filters, top.
void navigation(const ViewOptions& o, const std::vector<std::string>& available, ViewRequest& r) {
  r.population = o.population == "present" ? metrics::Population::Present : metrics::Population::All;
  if (o.sort == "name") {
    r.sortByName = true;
  } else if (!o.sort.empty()) {
    r.sortBy = parseSortColumn(o.sort, r.columns.front(), available);
    // Sorting by a formula: its column of the chosen scope.
    for (const auto& c : r.columns)
      if (!c.formula.empty() && c.metric == r.sortBy->metric && c.scope == r.sortBy->scope) r.sortBy = c;
  }
  r.depth = o.depth;
  if (!o.depth && o.kind == ViewKind::Callers) r.depth = 2;
  if (o.threshold) r.thresholdPercent = *o.threshold;
  r.hotPathPercent = o.hotPath;
  r.focus = o.focus;
  r.top = o.top;
  if (r.top && *r.top == 0) throw ViewError("--top needs a positive number");
  r.hide = o.hide;
  r.keep = o.keep;
  r.threads = o.threads;
}

TreeRequest treeRequest(const storage::Database& db, const ViewOptions& o, Selection s) {
  TreeRequest r;
  r.view.kind = o.kind;
  auto available = availableMetrics(db, o.kind);
  std::vector<std::string> effortMetrics;  // --effort: the idleness-accounting metrics present
  if (o.effort) r.effort = effortReading(o, available, effortMetrics);
  const auto shown = !s.metrics.empty() ? s.metrics
                     : o.effort         ? effortMetrics
                                        : std::vector<std::string>{available.at(0)};
  if (s.statistics.empty()) s.statistics = {Statistic::Sum};
  // The Flat view answers "which code costs itself the most" (perf's and pprof's first view):
  // self cost first, and sorted and pruned by it.
  if (s.scopes.empty())
    s.scopes = o.effort                   ? std::vector<MetricScope>{MetricScope::Inclusive}
               : o.kind == ViewKind::Flat ? std::vector<MetricScope>{MetricScope::Exclusive, MetricScope::Inclusive}
                                          : std::vector<MetricScope>{MetricScope::Inclusive, MetricScope::Exclusive};
  for (const auto& m : shown)
    for (auto st : s.statistics)
      for (auto sc : s.scopes) r.view.columns.push_back({m, st, sc});
  if (o.effort) addEffortColumns(effortMetrics, s, r.view.columns);
  if (o.kind == ViewKind::Regions && !s.formulas.empty())
    throw ViewError("--formula applies to the calling context, callers and flat views");
  addFormulaColumns(s, available, r.view.columns);
  navigation(o, available, r.view);
  return r;
}

}  // namespace

Request requestFrom(const storage::Database& db, const ViewOptions& o) {
  const auto selection = selectionOf(o);
  if (o.info) return infoRequest(o);
  if (o.imbalance) return imbalanceRequest(o, selection);
  if (!o.node.empty()) return nodeRequest(db, o, selection);
  return treeRequest(db, o, selection);
}

}  // namespace csp::views
