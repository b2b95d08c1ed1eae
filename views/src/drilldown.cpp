// Per-thread drill-down of one CCT node: the only part of views/ that reads per-thread values,
// and then only the one node's values (one prefix scan of the by-node order).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

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

storage::NodeId resolveNode(const storage::Database& db, const std::string& spec) {
  const auto count = db.metadata().nodeCount;
  if (spec.empty()) throw ViewError("--node needs a node id or a call path such as main/solve");
  if (std::all_of(spec.begin(), spec.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const auto id = spec.size() > 10 ? std::uint64_t{UINT64_MAX} : std::stoull(spec);
    if (id >= count) throw ViewError(fmt::format("no CCT node {} (the CCT has nodes 0 to {})", spec, count ? count - 1 : 0));
    return static_cast<storage::NodeId>(id);
  }
  // A call path: each segment a procedure reached from the previous one's frame through any
  // loops, inlined code and call sites (but no other procedure).
  const auto parts = splitPath(spec);
  if (parts.empty()) throw ViewError(fmt::format("--node {}: empty call path", spec));
  const auto idx = detail::CctIndex::read(db);
  const auto& strings = db.metadata().strings;
  std::vector<storage::NodeId> frontier{0};
  for (const auto& name : parts) {
    std::vector<storage::NodeId> next;
    for (auto start : frontier) {
      std::vector<storage::NodeId> stack;
      for (auto c = idx.childBegin[start]; c < idx.childBegin[start + 1]; ++c) stack.push_back(idx.child[c]);
      while (!stack.empty()) {
        const auto id = stack.back();
        stack.pop_back();
        const auto& n = idx.nodes[id];
        if (n.kind == ScopeKind::ProcFrame) {
          if (strings[n.name] == name) next.push_back(id);
          continue;
        }
        for (auto c = idx.childBegin[id]; c < idx.childBegin[id + 1]; ++c) stack.push_back(idx.child[c]);
      }
    }
    if (next.empty()) throw ViewError(fmt::format("--node {}: no procedure '{}' on this call path", spec, name));
    frontier = std::move(next);
  }
  if (frontier.size() > 1) {
    std::sort(frontier.begin(), frontier.end());
    std::string ids;
    for (std::size_t i = 0; i < std::min<std::size_t>(frontier.size(), 8); ++i) ids += fmt::format("{}{}", i ? ", " : "", frontier[i]);
    throw ViewError(fmt::format("--node {}: {} nodes match (ids {}{}); give a longer path or an id", spec, frontier.size(), ids,
                                frontier.size() > 8 ? ", ..." : ""));
  }
  return frontier[0];
}

Distribution drillDown(const storage::Database& db, storage::NodeId node, const std::string& metric,
                       storage::MetricScope scope, std::size_t bins) {
  const auto& meta = db.metadata();
  if (node >= meta.nodeCount) throw ViewError(fmt::format("no CCT node {}", node));
  std::vector<Column> columns{{metric, Statistic::Sum, scope}};
  const auto metrics = detail::resolveMetrics(db, columns);
  const auto stored = db.node(node);
  if (!stored) throw storage::DatabaseError(db.directory(), fmt::format("damaged database: CCT node {} is missing", node));
  const auto label = detail::labelOf(db, node, *stored);

  Distribution d;
  d.node = node;
  d.label = detail::matchLabel(label);
  if (label.kind == NodeKind::Procedure || label.kind == NodeKind::Inlined) {
    const auto where = detail::fileLine(label.file, label.line);
    if (!where.empty()) d.label += " (" + where + ")";
  }
  d.metric = metrics.names[0];
  d.unit = metrics.units[0];
  d.scope = scope;
  d.profiles = meta.profiles.size();
  const bool real = metrics.types[0] == storage::ValueType::Real;

  metrics::IntAccumulator ia;
  metrics::RealAccumulator ra;
  for (const auto& v : db.nodeValues(node, metrics.ids[0], scope)) {
    if (v.profile >= meta.profiles.size())
      throw storage::DatabaseError(db.directory(), fmt::format("damaged database: value of node {} for profile {}", node, v.profile));
    ThreadValue t;
    t.profile = v.profile;
    t.who = formatIdTuple(meta.profiles[v.profile]);
    t.value = real ? std::bit_cast<double>(v.value) : static_cast<double>(v.value);
    if (real)
      ra.accumulate(v.profile, t.value);
    else
      ia.accumulate(v.profile, v.value);
    d.values.push_back(std::move(t));
  }
  d.all = real ? ra.finalize(d.profiles, metrics::Population::All) : ia.finalize(d.profiles, metrics::Population::All);
  d.present = real ? ra.finalize(d.profiles, metrics::Population::Present) : ia.finalize(d.profiles, metrics::Population::Present);
  std::stable_sort(d.values.begin(), d.values.end(), [](const auto& a, const auto& b) { return a.value > b.value; });

  for (const auto& v : d.values)
    if (d.all.stddev > 0 && std::fabs(v.value - d.all.mean) > 3 * d.all.stddev) d.outliers.push_back(v);

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
