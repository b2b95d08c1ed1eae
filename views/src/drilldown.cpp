// Per-thread drill-down of one CCT node: the only part of views/ that reads per-thread values,
// and then only the one node's values (one prefix scan of the by-node order).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>

#include "csp/metrics/accumulator.hpp"
#include "model.hpp"
#include "sources.hpp"

namespace csp::views {

namespace {

std::vector<std::string> splitPath(const std::string& spec) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const auto slash = spec.find('/', start);
    const auto end = slash == std::string::npos ? spec.size() : slash;
    if (end > start) parts.push_back(spec.substr(start, end - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return parts;
}

}  // namespace

namespace {

bool isNumber(const std::string& spec) {
  return !spec.empty() && std::all_of(spec.begin(), spec.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The procedure frames named `name` reached from `start` through loops, inlined code and call
// sites but no other procedure.
void framesBelow(const detail::CctIndex& idx, const std::vector<std::string>& strings, storage::NodeId start,
                 const std::string& name, std::vector<storage::NodeId>& out) {
  std::vector<storage::NodeId> stack;
  for (auto c = idx.childBegin[start]; c < idx.childBegin[start + 1]; ++c) stack.push_back(idx.child[c]);
  while (!stack.empty()) {
    const auto id = stack.back();
    stack.pop_back();
    const auto& n = idx.nodes[id];
    if (n.kind == ScopeKind::ProcFrame) {
      if (strings[n.name] == name) out.push_back(id);
      continue;
    }
    for (auto c = idx.childBegin[id]; c < idx.childBegin[id + 1]; ++c) stack.push_back(idx.child[c]);
  }
}

std::string labelWithPlace(const detail::ModelNode& label) {
  std::string out = detail::matchLabel(label);
  if (label.kind == NodeKind::Procedure || label.kind == NodeKind::Inlined) {
    const auto where = detail::fileLine(label.file, label.line);
    if (!where.empty()) out += " (" + where + ")";
  }
  return out;
}

// The call path's nodes: the first name below the root or, when no root path starts with it,
// anywhere in the tree.
std::vector<storage::NodeId> resolvePath(const storage::Database& db, const detail::CctIndex& idx,
                                         const std::string& spec) {
  const auto parts = splitPath(spec);
  if (parts.empty()) throw ViewError(fmt::format("--node {}: empty call path", spec));
  const auto& strings = db.metadata().strings;
  std::vector<storage::NodeId> frontier;
  framesBelow(idx, strings, 0, parts[0], frontier);
  if (frontier.empty()) {
    for (std::size_t i = 0; i < idx.size(); ++i)
      if (idx.nodes[i].kind == ScopeKind::ProcFrame && strings[idx.nodes[i].name] == parts[0])
        frontier.push_back(static_cast<storage::NodeId>(i));
    if (frontier.empty()) throw ViewError(fmt::format("--node {}: no procedure '{}' in the CCT", spec, parts[0]));
  }
  for (std::size_t p = 1; p < parts.size(); ++p) {
    std::vector<storage::NodeId> next;
    for (auto start : frontier) framesBelow(idx, strings, start, parts[p], next);
    if (next.empty()) throw ViewError(fmt::format("--node {}: no procedure '{}' on this call path", spec, parts[p]));
    frontier = std::move(next);
  }
  std::sort(frontier.begin(), frontier.end());
  return frontier;
}

}  // namespace

storage::NodeId resolveNode(const storage::Database& db, const std::string& spec) {
  const auto count = db.metadata().nodeCount;
  if (spec.empty()) throw ViewError("--node needs a node id or a call path such as main/solve");
  if (isNumber(spec)) {
    const auto id = spec.size() > 10 ? std::uint64_t{UINT64_MAX} : std::stoull(spec);
    if (id >= count)
      throw ViewError(fmt::format("no CCT node {} (the CCT has nodes 0 to {})", spec, count ? count - 1 : 0));
    return static_cast<storage::NodeId>(id);
  }
  const auto idx = detail::CctIndex::read(db);
  const auto frontier = resolvePath(db, idx, spec);
  if (frontier.size() > 1) {
    std::string ids;
    for (std::size_t i = 0; i < std::min<std::size_t>(frontier.size(), 8); ++i)
      ids += fmt::format("{}{}", i ? ", " : "", frontier[i]);
    throw ViewError(fmt::format("--node {}: {} nodes match (ids {}{}); give a longer path or an id", spec,
                                frontier.size(), ids, frontier.size() > 8 ? ", ..." : ""));
  }
  return frontier[0];
}

DrillTarget resolveDrillTarget(const storage::Database& db, const std::string& spec, ViewKind kind) {
  if (spec.empty()) throw ViewError("--node needs a node id, a procedure name or a call path such as main/solve");
  DrillTarget t;
  if (isNumber(spec) && (kind == ViewKind::Flat || kind == ViewKind::Callers)) {
    const auto id = spec.size() > 10 ? std::uint64_t{UINT64_MAX} : std::stoull(spec);
    std::vector<Column> columns;
    auto metrics = detail::resolveMetrics(db, columns);
    auto model = kind == ViewKind::Flat ? detail::makeFlat(db, metrics) : detail::makeCallers(db, metrics);
    const auto handle = model->byId(id);
    if (!handle)
      throw ViewError(fmt::format("--node {}: no {} node {}{}", spec, toString(kind), id,
                                  kind == ViewKind::Callers ? " (callers ids of procedures only)" : ""));
    const auto& m = model->node(*handle);
    t.label = labelWithPlace(m);
    for (const auto& [node, inclusive] : model->contributors(*handle)) {
      t.nodes.push_back(node);
      t.inclusive.push_back(inclusive);
    }
    t.what = fmt::format("{} node {}, {} context{} combined", toString(kind), id, t.nodes.size(),
                         t.nodes.size() == 1 ? "" : "s");
    return t;
  }
  if (isNumber(spec)) {
    const auto id = resolveNode(db, spec);
    const auto stored = db.node(id);
    if (!stored)
      throw storage::DatabaseError(db.directory(), fmt::format("damaged database: CCT node {} is missing", id));
    t.label = labelWithPlace(detail::labelOf(db, id, *stored));
    t.nodes = {id};
    t.inclusive = {true};
    t.what = fmt::format("CCT node {}", id);
    return t;
  }
  const auto idx = detail::CctIndex::read(db);
  const auto frontier = resolvePath(db, idx, spec);
  t.label = labelWithPlace(detail::labelOf(db, frontier[0], idx.nodes[frontier[0]]));
  // Several contexts of the procedure: combined as the Flat view combines a procedure's
  // instances (inclusive values only from those with no other instance above them).
  std::vector<char> member(idx.size(), 0);
  for (auto id : frontier) member[id] = 1;
  for (auto id : frontier) {
    bool outermost = true;
    for (auto p = idx.nodes[id].parent; p != kNoIndex && outermost; p = idx.nodes[p].parent)
      if (member[p]) outermost = false;
    t.nodes.push_back(id);
    t.inclusive.push_back(outermost);
  }
  t.what = t.nodes.size() == 1 ? fmt::format("CCT node {}", t.nodes[0])
                               : fmt::format("{} contexts combined", t.nodes.size());
  return t;
}

Distribution drillDown(const storage::Database& db, storage::NodeId node, const std::string& metric,
                       storage::MetricScope scope, std::size_t bins) {
  const auto& meta = db.metadata();
  if (node >= meta.nodeCount) throw ViewError(fmt::format("no CCT node {}", node));
  return drillDown(db, resolveDrillTarget(db, std::to_string(node)), metric, scope, bins, "all");
}

Distribution drillDown(const storage::Database& db, const DrillTarget& target, const std::string& metric,
                       storage::MetricScope scope, std::size_t bins, const std::string& threads) {
  const auto& meta = db.metadata();
  std::vector<Column> columns{{metric, Statistic::Sum, scope}};
  const auto metrics = detail::resolveMetrics(db, columns);

  Distribution d;
  d.node = target.nodes.empty() ? 0 : target.nodes[0];
  d.label = target.label;
  d.what = target.what;
  d.metric = metrics.names[0];
  d.unit = metrics.units[0];
  d.scope = scope;
  d.threads = selectThreads(db, threads);
  d.profiles = d.threads.profiles;
  const bool real = metrics.types[0] == storage::ValueType::Real;
  auto selected = [&](storage::ProfileId p) {
    return d.threads.all || d.threads.classes[static_cast<std::size_t>(meta.threadClasses[p].threadClass)];
  };

  // Per-thread values of the target: summed over its nodes (inclusive ones only where marked).
  std::map<storage::ProfileId, double> realSum;
  std::map<storage::ProfileId, std::uint64_t> intSum;
  for (std::size_t k = 0; k < target.nodes.size(); ++k) {
    if (scope == storage::MetricScope::Inclusive && !target.inclusive[k]) continue;
    for (const auto& v : db.nodeValues(target.nodes[k], metrics.ids[0], scope)) {
      if (v.profile >= meta.profiles.size())
        throw storage::DatabaseError(db.directory(), fmt::format("damaged database: value of node {} for profile {}",
                                                                 target.nodes[k], v.profile));
      if (!selected(v.profile)) continue;
      if (real)
        realSum[v.profile] += std::bit_cast<double>(v.value);
      else if (__builtin_add_overflow(intSum[v.profile], v.value, &intSum[v.profile]))
        throw ViewError(fmt::format("--node: a thread's value of {} exceeds 2^64 - 1", d.label));
    }
  }
  metrics::IntAccumulator ia;
  metrics::RealAccumulator ra;
  auto add = [&](storage::ProfileId profile, double value) {
    ThreadValue t;
    t.profile = profile;
    t.who = formatIdTuple(meta.profiles[profile]);
    t.value = value;
    if (!meta.threadClasses.empty()) t.threadClass = storage::toString(meta.threadClasses[profile].threadClass);
    d.values.push_back(std::move(t));
  };
  for (const auto& [p, v] : realSum) ra.accumulate(p, v), add(p, v);
  for (const auto& [p, v] : intSum)
    if (v != 0) ia.accumulate(p, v), add(p, static_cast<double>(v));
  d.all = real ? ra.finalize(d.profiles, metrics::Population::All) : ia.finalize(d.profiles, metrics::Population::All);
  d.present = real ? ra.finalize(d.profiles, metrics::Population::Present)
                   : ia.finalize(d.profiles, metrics::Population::Present);
  std::stable_sort(d.values.begin(), d.values.end(), [](const auto& a, const auto& b) { return a.value > b.value; });

  // Exact percentiles by the nearest-rank rule: over the present values, and over all N with
  // the absent ones as zeros.
  auto fill = [&](metrics::Statistics& s, std::uint64_t population, std::uint64_t zeros) {
    if (population == 0) return;
    double* fields[] = {&s.p5, &s.p25, &s.p50, &s.p75, &s.p95};
    const double ps[] = {5, 25, 50, 75, 95};
    for (std::size_t i = 0; i < 5; ++i) {
      auto rank = static_cast<std::uint64_t>(std::ceil(static_cast<long double>(ps[i]) / 100.0L * population));
      rank = std::clamp<std::uint64_t>(rank, 1, population);
      // Ascending order: `zeros` zeros, then d.values from the back (it is sorted descending).
      *fields[i] = rank <= zeros ? 0.0 : d.values[d.values.size() - (rank - zeros)].value;
    }
    s.imbalanceMedian = s.p50 > 0 ? s.max / s.p50 : NAN;
  };
  fill(d.present, d.values.size(), 0);
  fill(d.all, d.profiles, d.profiles - d.values.size());

  const auto& stored = db.metrics()[metrics.ids[0]];
  d.perThreadError = real ? NAN
                     : stored.descriptor.kind == MetricKind::Counted
                         ? 0.0
                         : static_cast<double>(std::max<std::uint64_t>(stored.descriptor.period, 1) - 1);
  const double meanError =
      d.profiles ? static_cast<double>(d.all.count) * d.perThreadError / static_cast<double>(d.profiles) : 0;
  for (const auto& v : d.values) {
    if (!(d.all.stddev > 0 && std::fabs(v.value - d.all.mean) > 3 * d.all.stddev)) continue;
    d.outliers.push_back(v);
    d.outlierWithinError.push_back(!std::isnan(d.perThreadError) &&
                                   std::fabs(v.value - d.all.mean) <= d.perThreadError + meanError);
  }

  const double hi = d.values.empty() ? 0 : std::max(d.values.front().value, 0.0);
  const double lo = d.values.empty() ? 0 : std::min(d.values.back().value, 0.0);
  bins = std::max<std::size_t>(bins, 1);
  const double width = hi > lo ? (hi - lo) / static_cast<double>(bins) : 1;
  for (std::size_t b = 0; b < bins; ++b)
    d.histogram.push_back({lo + width * static_cast<double>(b), lo + width * static_cast<double>(b + 1), 0});
  auto binOf = [&](double v) {
    auto b = static_cast<std::size_t>((v - lo) / width);
    return std::min(b, bins - 1);
  };
  for (const auto& v : d.values) d.histogram[binOf(v.value)].count++;
  d.histogram[binOf(0)].count += d.profiles - d.values.size();  // absent profiles hold 0
  return d;
}

}  // namespace csp::views
