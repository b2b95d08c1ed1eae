#include "csp/analysis/memory.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "csp/metrics/histogram.hpp"

namespace csp::analysis {

using storage::MetricId;
using storage::NodeId;
using storage::StringId;

namespace {

namespace mm = csp::metrics::memory;
using metrics::LogLinearHistogram;

struct BinTotals {
  std::uint64_t calls = 0, cost = 0, max = 0;
};

// The metric ids of memory profiles (kNoIndex where the database has none).
struct MemoryMetrics {
  std::uint32_t calls = kNoIndex, cost = kNoIndex, trms = kNoIndex, rms = kNoIndex, thread = kNoIndex,
                kernel = kNoIndex, sizeCalls = kNoIndex, sizeCost = kNoIndex, sizeMax = kNoIndex, windows = kNoIndex,
                time = kNoIndex, sizeTime = kNoIndex, sizeTimeMax = kNoIndex;
  // The metrics of the chosen cost: instructions, or the thread CPU time.
  void choose(mm::CostMetric c) {
    if (c != mm::CostMetric::Time) return;
    cost = time, sizeCost = sizeTime, sizeMax = sizeTimeMax;
  }
};

MemoryMetrics metricIds(const storage::Database& db) {
  MemoryMetrics m;
  const std::pair<const char*, std::uint32_t*> names[] = {{mm::kCalls, &m.calls},
                                                          {mm::kCost, &m.cost},
                                                          {mm::kTrms, &m.trms},
                                                          {mm::kRms, &m.rms},
                                                          {mm::kInducedThread, &m.thread},
                                                          {mm::kInducedKernel, &m.kernel},
                                                          {mm::kSizeCalls, &m.sizeCalls},
                                                          {mm::kSizeCost, &m.sizeCost},
                                                          {mm::kSizeMax, &m.sizeMax},
                                                          {mm::kWindows, &m.windows},
                                                          {mm::kTime, &m.time},
                                                          {mm::kSizeTime, &m.sizeTime},
                                                          {mm::kSizeTimeMax, &m.sizeTimeMax}};
  for (std::size_t id = 0; id < db.metrics().size(); ++id)
    for (const auto& [name, slot] : names)
      if (db.metrics()[id].descriptor.name == name) *slot = static_cast<MetricId>(id);
  return m;
}

// The canonical CCT with children lists and names, read once.
struct Tree {
  std::vector<storage::CctNode> nodes;
  std::vector<std::vector<NodeId>> children;
  const std::vector<std::string>* strings = nullptr;
  const std::string& text(StringId id) const {
    static const std::string kEmpty;
    return id < strings->size() ? (*strings)[id] : kEmpty;
  }
};

Tree readTree(const storage::Database& db) {
  Tree t;
  t.nodes = db.readCct();
  t.children.resize(t.nodes.size());
  t.strings = &db.metadata().strings;
  for (NodeId id = 1; id < t.nodes.size(); ++id)
    if (t.nodes[id].parent < t.nodes.size()) t.children[t.nodes[id].parent].push_back(id);
  return t;
}

// Exclusive per-thread values of `metric` at `node`, summed (and their maximum).
std::pair<std::uint64_t, std::uint64_t> sumAndMax(const std::vector<storage::NodeValue>& values, std::uint32_t metric) {
  std::uint64_t sum = 0, max = 0;
  for (const auto& v : values)
    if (v.metric == metric && v.scope == storage::MetricScope::Exclusive) sum += v.value, max = std::max(max, v.value);
  return {sum, max};
}

// One procedure frame of the routine: its entry statement's totals and its size bins.
void addContext(const storage::Database& db, const Tree& t, NodeId proc, const MemoryMetrics& m, mm::SizeKind kind,
                CostFunction& f, std::map<std::uint32_t, BinTotals>& bins) {
  for (const auto child : t.children[proc]) {
    const auto& c = t.nodes[child];
    if (c.kind != ScopeKind::Stmt) continue;
    const auto values = db.nodeValues(child);
    const auto& file = t.text(c.file);
    if (file == mm::binFile(kind)) {
      auto& b = bins[c.line];
      b.calls += sumAndMax(values, m.sizeCalls).first;
      b.cost += sumAndMax(values, m.sizeCost).first;
      b.max = std::max(b.max, sumAndMax(values, m.sizeMax).second);
    } else if (file != mm::kTrmsBinFile && file != mm::kRmsBinFile) {
      f.calls += sumAndMax(values, m.calls).first;
      f.cost += sumAndMax(values, m.cost).first;
      f.trms += sumAndMax(values, m.trms).first;
      f.rms += sumAndMax(values, m.rms).first;
      f.inducedThread += sumAndMax(values, m.thread).first;
      f.inducedKernel += sumAndMax(values, m.kernel).first;
    }
  }
}

std::vector<CostPoint> pointsOf(const std::map<std::uint32_t, BinTotals>& bins) {
  std::vector<CostPoint> points;
  for (const auto& [bin, t] : bins) {
    if (t.calls == 0 || bin >= LogLinearHistogram::kBinCount) continue;
    CostPoint p;
    p.bin = bin;
    p.sizeLow = LogLinearHistogram::binLower(bin);
    p.sizeHigh = LogLinearHistogram::binUpper(bin);
    p.size = (static_cast<double>(p.sizeLow) + static_cast<double>(p.sizeHigh)) / 2;
    p.calls = t.calls;
    p.meanCost = static_cast<double>(t.cost) / static_cast<double>(t.calls);
    p.worstCost = t.max;
    points.push_back(p);
  }
  return points;
}

CostFunction build(const storage::Database& db, const Tree& t, const std::vector<NodeId>& procs,
                   const std::string& routine, const MemoryMetrics& m, mm::SizeKind kind) {
  CostFunction f;
  f.routine = routine;
  f.kind = kind;
  f.contexts = procs.size();
  std::map<std::uint32_t, BinTotals> bins;
  for (const auto proc : procs) addContext(db, t, proc, m, kind, f, bins);
  f.points = pointsOf(bins);
  f.power = fitGrowth(f.points, 0);
  f.nLogN = fitGrowth(f.points, 1);
  return f;
}

// Procedure frames by name.
std::map<std::string, std::vector<NodeId>> proceduresByName(const Tree& t) {
  std::map<std::string, std::vector<NodeId>> out;
  for (NodeId id = 0; id < t.nodes.size(); ++id)
    if (t.nodes[id].kind == ScopeKind::ProcFrame) out[t.text(t.nodes[id].name)].push_back(id);
  return out;
}

}  // namespace

GrowthFit fitGrowth(const std::vector<CostPoint>& points, double c) {
  std::vector<std::pair<double, double>> xy;
  for (const auto& p : points)
    if (p.size >= 2 && p.worstCost > 0)
      xy.emplace_back(std::log(p.size), std::log(static_cast<double>(p.worstCost)) - c * std::log(std::log2(p.size)));
  GrowthFit fit;
  fit.c = c;
  fit.points = xy.size();
  if (xy.size() < 3) return fit;
  double mx = 0, my = 0;
  for (const auto& [x, y] : xy) mx += x, my += y;
  mx /= static_cast<double>(xy.size());
  my /= static_cast<double>(xy.size());
  double sxx = 0, sxy = 0, syy = 0;
  for (const auto& [x, y] : xy) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my), syy += (y - my) * (y - my);
  if (sxx <= 0) return fit;
  fit.b = sxy / sxx;
  fit.a = std::exp(my - fit.b * mx);
  double residual = 0;
  for (const auto& [x, y] : xy) residual += std::pow(y - (my + fit.b * (x - mx)), 2);
  fit.r2 = syy > 0 ? 1 - residual / syy : 1;
  fit.valid = true;
  return fit;
}

std::optional<CostFunction> costFunction(const storage::Database& db, const std::string& routine, mm::SizeKind kind,
                                         mm::CostMetric cost) {
  const auto t = readTree(db);
  const auto byName = proceduresByName(t);
  const auto it = byName.find(routine);
  if (it == byName.end()) return std::nullopt;
  auto m = metricIds(db);
  m.choose(cost);
  auto f = build(db, t, it->second, routine, m, kind);
  f.costMetric = cost;
  if (f.calls == 0) return std::nullopt;
  return f;
}

std::vector<CostFunction> growthRanking(const storage::Database& db, mm::SizeKind kind, std::size_t minPoints,
                                        mm::CostMetric cost) {
  const auto t = readTree(db);
  auto m = metricIds(db);
  m.choose(cost);
  std::vector<CostFunction> out;
  for (const auto& [name, procs] : proceduresByName(t)) {
    if (name == mm::kFootprintFrame) continue;
    auto f = build(db, t, procs, name, m, kind);
    f.costMetric = cost;
    if (f.calls > 0 && f.best().valid && f.points.size() >= minPoints) out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const CostFunction& x, const CostFunction& y) {
    if (x.best().b != y.best().b) return x.best().b > y.best().b;
    return x.routine < y.routine;
  });
  return out;
}

namespace {

FootprintCurves windowCurves(const storage::Database& db, const char* frame, const char* metricName) {
  const auto t = readTree(db);
  std::uint32_t windows = kNoIndex;
  for (std::size_t id = 0; id < db.metrics().size(); ++id)
    if (db.metrics()[id].descriptor.name == metricName) windows = static_cast<std::uint32_t>(id);
  std::map<std::uint32_t, LogLinearHistogram> byLength;
  std::vector<bool> holds(db.metadata().profiles.size(), false);
  FootprintCurves out;
  const auto byName = proceduresByName(t);
  const auto it = byName.find(frame);
  if (it == byName.end()) return out;
  for (const auto proc : it->second)
    for (const auto loop : t.children[proc]) {
      if (t.nodes[loop].kind != ScopeKind::Loop || t.text(t.nodes[loop].file) != mm::kLengthBinFile) continue;
      for (const auto stmt : t.children[loop]) {
        const auto sizeBin = t.nodes[stmt].line;
        if (sizeBin >= LogLinearHistogram::kBinCount) continue;
        for (const auto& v : db.nodeValues(stmt)) {
          if (v.metric != windows || v.scope != storage::MetricScope::Exclusive) continue;
          byLength[t.nodes[loop].line].add(LogLinearHistogram::binLower(sizeBin), v.value);
          if (v.profile < holds.size()) holds[v.profile] = true;
        }
      }
    }
  out.threads = static_cast<std::uint64_t>(std::count(holds.begin(), holds.end(), true));
  for (const auto& [bin, hist] : byLength) {
    if (bin >= LogLinearHistogram::kBinCount) continue;
    const LogLinearHistogram& h = hist;  // (a lambda below uses it: clang 14 captures no binding)
    FootprintPoint p;
    p.lengthBin = bin;
    p.lengthLow = LogLinearHistogram::binLower(bin);
    p.lengthHigh = LogLinearHistogram::binUpper(bin);
    p.windows = h.total();
    const auto mid = [&](double q) {
      const auto b = h.percentileBin(q, h.total());
      return (static_cast<double>(LogLinearHistogram::binLower(b)) +
              static_cast<double>(LogLinearHistogram::binUpper(b))) /
             2;
    };
    p.p0 = mid(0), p.p5 = mid(5), p.p50 = mid(50), p.p95 = mid(95), p.p100 = mid(100);
    out.points.push_back(p);
  }
  return out;
}

}  // namespace

FootprintCurves footprintCurves(const storage::Database& db) {
  return windowCurves(db, mm::kFootprintFrame, mm::kWindows);
}

FootprintCurves interleavingCurves(const storage::Database& db) {
  return windowCurves(db, mm::kInterleavingFrame, mm::kDegreeWindows);
}

}  // namespace csp::analysis
