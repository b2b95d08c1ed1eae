// Shared pieces of the view sources: accumulators of either type, the CCT index, matching.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>
#include <algorithm>

#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>

#include "csp/metrics/encoding.hpp"
#include "csp/metrics/expression.hpp"
#include "model.hpp"

namespace csp::views {

const char* toString(ViewKind kind) {
  switch (kind) {
    case ViewKind::CallingContext:
      return "calling-context";
    case ViewKind::Callers:
      return "callers";
    case ViewKind::Flat:
      return "flat";
    case ViewKind::Regions:
      return "regions";
  }
  return "unknown";
}

bool hasPercent(Statistic s) {
  // A spread (stddev) is no share of anything; ratios and counts neither.
  return s == Statistic::Sum || s == Statistic::Mean || s == Statistic::Min || s == Statistic::Max ||
         metrics::isPercentile(s);
}

const char* toString(NodeKind kind) {
  switch (kind) {
    case NodeKind::Root:
      return "root";
    case NodeKind::Module:
      return "module";
    case NodeKind::File:
      return "file";
    case NodeKind::Procedure:
      return "procedure";
    case NodeKind::Inlined:
      return "inlined";
    case NodeKind::Loop:
      return "loop";
    case NodeKind::CallSite:
      return "callsite";
    case NodeKind::Statement:
      return "statement";
    case NodeKind::Region:
      return "region";
  }
  return "unknown";
}

std::string Column::title() const {
  if (!formula.empty()) return fmt::format("{}:{}", metric, scope == storage::MetricScope::Inclusive ? "I" : "E");
  return fmt::format("{}:{}:{}", metric, toString(statistic), scope == storage::MetricScope::Inclusive ? "I" : "E");
}

double ViewTree::percent(const TreeNode& node, std::size_t c) const {
  if (!columns[c].formula.empty()) return NAN;
  const Statistic s = columns[c].statistic;
  if (!hasPercent(s)) return NAN;
  // Sums against the root's total; per-thread statistics against the average thread's total, so
  // that "max 40 %" reads "one thread spends here 40 % of what a thread spends in all".
  // A total that can be negative (a scaling loss where other contexts gained more) is the base by
  // its size: a context's loss stays positive however the whole came out.
  const double base = std::fabs(s == Statistic::Sum ? rootSum[c] : rootMean[c]);
  if (!(base > 0) || std::isnan(node.values[c])) return NAN;
  return 100.0 * node.values[c] / base;
}

std::vector<storage::RegionMetricInfo> regionMetricsOf(const storage::Database& db) {
  return db.metadata().describedRegionMetrics();
}

}  // namespace csp::views

namespace csp::views::detail {

using storage::ValueType;

Acc Acc::emptyInstance(ValueType type, bool withHistogram, double unit) {
  Acc a;
  if (type == ValueType::Real) a.v_ = metrics::RealAccumulator();
  a.hasHistogram_ = withHistogram;
  a.unit_ = unit;
  return a;
}

Acc Acc::combined(ValueType type, bool withHistogram, double unit) {
  Acc a;
  if (type == ValueType::Real)
    a.v_ = metrics::RealAccumulator::forCombinedNode();
  else
    a.v_ = metrics::IntAccumulator::forCombinedNode();
  a.hasHistogram_ = withHistogram;
  a.unit_ = unit;
  return a;
}

void Acc::setHistogram(std::string_view bytes, double unit) {
  histogram_ = bytes.empty() ? metrics::LogLinearHistogram() : metrics::decodeHistogram(bytes);
  hasHistogram_ = true;
  unit_ = unit;
}

void Acc::merge(const Acc& part) {
  if (v_.index() != part.v_.index()) throw std::logic_error("combining accumulators of different value types");
  if (auto* i = std::get_if<metrics::IntAccumulator>(&v_))
    i->combine(std::get<metrics::IntAccumulator>(part.v_));
  else
    std::get<metrics::RealAccumulator>(v_).combine(std::get<metrics::RealAccumulator>(part.v_));
  if (part.hasHistogram_) {
    histogram_.merge(part.histogram_);
    unit_ = part.unit_;
  }
  hasHistogram_ = hasHistogram_ && part.hasHistogram_;
}

Acc Acc::decode(ValueType type, std::string_view bytes) {
  Acc a;
  if (type == ValueType::Real)
    a.v_ = metrics::decodeRealAccumulator(bytes);
  else
    a.v_ = metrics::decodeIntAccumulator(bytes);
  return a;
}

void Acc::add(const Acc& instance) {
  if (v_.index() != instance.v_.index()) throw std::logic_error("combining accumulators of different value types");
  if (auto* i = std::get_if<metrics::IntAccumulator>(&v_))
    i->combineInstance(std::get<metrics::IntAccumulator>(instance.v_));
  else
    std::get<metrics::RealAccumulator>(v_).combineInstance(std::get<metrics::RealAccumulator>(instance.v_));
  if (hasHistogram_ && instance.hasHistogram_) histogram_.merge(instance.histogram_);
  hasHistogram_ = hasHistogram_ && instance.hasHistogram_;
}

metrics::Statistics Acc::finalize(std::uint64_t profiles, metrics::Population population) const {
  auto s = std::visit([&](const auto& a) { return a.finalize(profiles, population); }, v_);
  // Present population: the histogram holds exactly the present values; all: plus the zeros
  // of the absent (instance, profile) pairs, which percentile() adds.
  if (hasHistogram_ && s.inputs >= histogram_.total()) metrics::addPercentiles(s, histogram_, s.inputs, unit_);
  return s;
}

std::uint64_t Acc::instances() const {
  return std::visit([](const auto& a) { return a.instances(); }, v_);
}

CctIndex CctIndex::read(const storage::Database& db) {
  CctIndex idx;
  idx.nodes = db.readCct();
  auto damaged = [&](const std::string& what) {
    throw storage::DatabaseError(db.directory(), "damaged database: CCT nodes: " + what);
  };

  const std::size_t n = idx.nodes.size();
  idx.childBegin.assign(n + 1, 0);
  for (std::size_t i = 1; i < n; ++i) idx.childBegin[idx.nodes[i].parent + 1]++;
  for (std::size_t i = 0; i < n; ++i) idx.childBegin[i + 1] += idx.childBegin[i];
  idx.child.resize(n > 0 ? n - 1 : 0);
  {
    std::vector<std::uint32_t> fill(idx.childBegin.begin(), idx.childBegin.end() - 1);
    for (std::size_t i = 1; i < n; ++i) idx.child[fill[idx.nodes[i].parent]++] = static_cast<storage::NodeId>(i);
  }

  // Procedures and enclosing frames need parents first: a preorder walk (ids need not be
  // preorder in databases written by other tools).
  idx.procedure.assign(n, kNoIndex);
  idx.frame.assign(n, kNoIndex);
  // (module, name) << 64 | (file, line) -> procedure id
  struct ProcHash {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint64_t>& k) const {
      return std::hash<std::uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
    }
  };
  std::unordered_map<std::pair<std::uint64_t, std::uint64_t>, std::uint32_t, ProcHash> procIds;
  std::vector<storage::NodeId> stack;
  if (n > 0) stack.push_back(0);
  std::size_t visited = 0;
  while (!stack.empty()) {
    const auto id = stack.back();
    stack.pop_back();
    ++visited;
    const auto& node = idx.nodes[id];
    if (node.kind == ScopeKind::ProcFrame) {
      auto [it, fresh] = procIds.try_emplace(
          {std::uint64_t{node.module} << 32 | node.name, std::uint64_t{node.file} << 32 | node.line},
          static_cast<std::uint32_t>(idx.procOf.size()));
      if (fresh) idx.procOf.push_back(id);
      idx.procedure[id] = it->second;
      idx.frame[id] = id;
    } else if (id != 0) {
      idx.frame[id] = idx.frame[node.parent];
    }
    for (auto c = idx.childBegin[id]; c < idx.childBegin[id + 1]; ++c) stack.push_back(idx.child[c]);
  }
  if (visited != n) damaged("the parent links do not form a tree");
  return idx;
}

bool nameMatches(const std::string& name, const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) return name.find(pattern) != std::string::npos;
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string fileLine(const std::string& file, std::uint32_t line) {
  if (file.empty()) return line ? fmt::format("?:{}", line) : "";
  return line ? fmt::format("{}:{}", file, line) : file;
}

std::string matchLabel(const ModelNode& n) {
  switch (n.kind) {
    case NodeKind::Root:
      return "<program root>";
    case NodeKind::Module:
    case NodeKind::File:
    case NodeKind::Procedure:
    case NodeKind::Inlined:
    case NodeKind::Region:
      return n.name;
    // Code without a line table: loops by header address, statements and calls by offset.
    case NodeKind::Loop:
      return n.name.empty() ? "loop " + fileLine(n.file, n.line) : n.name;
    case NodeKind::CallSite:
      return "call " + (n.name.empty() ? fileLine(n.file, n.line) : n.name);
    case NodeKind::Statement:
      return n.name.empty() ? fileLine(n.file, n.line) : n.name;
  }
  return n.name;
}

MetricSet resolveMetrics(const storage::Database& db, std::vector<Column>& columns) {
  const auto& metrics = db.metrics();
  if (metrics.empty()) throw ViewError(db.directory().string() + ": the database has no metrics");
  if (columns.empty()) {
    const auto& name = metrics[0].descriptor.name;
    columns = {{name, Statistic::Sum, storage::MetricScope::Inclusive},
               {name, Statistic::Sum, storage::MetricScope::Exclusive}};
  }
  MetricSet set;
  std::vector<std::string> needed;  // metric names, columns first, then formula references
  for (auto& c : columns) {
    if (c.formula.empty()) {
      needed.push_back(c.metric);
      continue;
    }
    try {
      const auto f = metrics::SummaryFormula::parse(c.formula);
      c.metric = f.name();
      for (const auto& r : f.references()) needed.push_back(r.metric);
    } catch (const metrics::ExpressionError& e) {
      throw ViewError(fmt::format("--formula '{}': {}", c.formula, e.what()));
    }
  }
  for (const auto& name : needed) {
    std::optional<storage::MetricId> id;
    for (std::size_t m = 0; m < metrics.size(); ++m)
      if (metrics[m].descriptor.name == name) id = static_cast<storage::MetricId>(m);
    if (!id) {
      std::string known;
      for (const auto& m : metrics) known += (known.empty() ? "" : ", ") + m.descriptor.name;
      throw ViewError(fmt::format("unknown metric '{}' (the database has: {})", name, known));
    }
    if (std::find(set.ids.begin(), set.ids.end(), *id) != set.ids.end()) continue;
    set.ids.push_back(*id);
    set.types.push_back(metrics[*id].valueType);
    set.names.push_back(metrics[*id].descriptor.name);
    set.units.push_back(metrics[*id].descriptor.unit);
  }
  return set;
}

MetricSet regionMetrics(const storage::Database& db, std::vector<Column>& columns) {
  // The database describes its region metrics (format 1.1; docs/database-format.md).
  MetricSet set;
  for (const auto& m : regionMetricsOf(db)) {
    set.ids.push_back(static_cast<storage::MetricId>(set.names.size()));
    set.names.push_back(m.name);
    set.units.push_back(m.unit);
    set.exclusiveOnly.push_back(!m.inclusive);
  }
  set.types.assign(set.ids.size(), ValueType::Count);
  if (columns.empty())
    columns = {{"time", Statistic::Sum, storage::MetricScope::Inclusive},
               {"time", Statistic::Sum, storage::MetricScope::Exclusive},
               {"visits", Statistic::Sum, storage::MetricScope::Exclusive}};
  for (const auto& c : columns)
    if (std::find(set.names.begin(), set.names.end(), c.metric) == set.names.end())
      throw ViewError(
          fmt::format("unknown region metric '{}' (regions have: {})", c.metric, fmt::join(set.names, ", ")));
  return set;
}

}  // namespace csp::views::detail
