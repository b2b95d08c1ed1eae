#include <fmt/format.h>

#include <stdexcept>

#include "csp/metrics/accumulator.hpp"
#include "csp/views/memory.hpp"
#include "csp/views/views.hpp"
#include "json.hpp"

namespace csp::views {

namespace {

using detail::dumpJson;
using metrics::compactNumber;

void requireTextOrJson(Format format, const char* what) {
  if (format != Format::Text && format != Format::Json)
    throw std::invalid_argument(fmt::format("{} has only the text and json formats", what));
}

nlohmann::json fitJson(const analysis::GrowthFit& fit) {
  if (!fit.valid) return nullptr;
  return {{"a", fit.a}, {"b", fit.b}, {"c", fit.c}, {"r2", fit.r2}, {"points", fit.points}};
}

std::string fitText(const analysis::GrowthFit& fit) {
  if (!fit.valid) return "no fit (fewer than 3 sizes)";
  return fmt::format("{} * n^{:.3f}{}  (R^2 {:.4f}, {} points)", compactNumber(fit.a), fit.b,
                     fit.c == 0 ? "" : fmt::format(" * log2(n)^{:g}", fit.c), fit.r2, fit.points);
}

const char* costUnit(const analysis::CostFunction& f) {
  return f.costMetric == metrics::memory::CostMetric::Time ? "ns" : "instructions";
}

nlohmann::json costJson(const analysis::CostFunction& f) {
  nlohmann::json points = nlohmann::json::array();
  for (const auto& p : f.points)
    points.push_back({{"size_low", p.sizeLow},
                      {"size_high", p.sizeHigh},
                      {"size", p.size},
                      {"calls", p.calls},
                      {"mean_cost", p.meanCost},
                      {"worst_cost", p.worstCost}});
  return {{"routine", f.routine},
          {"size", metrics::memory::toString(f.kind)},
          {"cost_metric", metrics::memory::toString(f.costMetric)},
          {"cost_unit", costUnit(f)},
          {"contexts", f.contexts},
          {"calls", f.calls},
          {"cost", f.cost},
          {"trms", f.trms},
          {"rms", f.rms},
          {"induced_thread", f.inducedThread},
          {"induced_kernel", f.inducedKernel},
          {"induced_share", detail::jsonNumber(f.inducedShare())},
          {"fit_power", fitJson(f.power)},
          {"fit_nlogn", fitJson(f.nLogN)},
          {"points", points}};
}

}  // namespace

void renderCostFunction(const analysis::CostFunction& f, Format format, std::ostream& out) {
  requireTextOrJson(format, "--cost");
  if (format == Format::Json) {
    out << dumpJson(costJson(f), 2) << "\n";
    return;
  }
  const auto* size = metrics::memory::toString(f.kind);
  out << fmt::format(
      "Cost function of {} ({} calls in {} calling contexts; cost in {}, input size = {} "
      "in cells)\n",
      f.routine, f.calls, f.contexts,
      f.costMetric == metrics::memory::CostMetric::Time ? "ns of thread CPU time under the tool" : "instructions",
      size);
  out << fmt::format("  fit, power law:  cost = {}\n", fitText(f.power));
  out << fmt::format("  fit, n^b log n:  cost = {}\n", fitText(f.nLogN));
  out << fmt::format(
      "  input: TRMS {} cells, RMS {}; induced first reads {} from threads, {} from the kernel ({:.1f} "
      "% of TRMS)\n",
      f.trms, f.rms, f.inducedThread, f.inducedKernel, 100 * f.inducedShare());
  out << fmt::format("  {:>21}  {:>10}  {:>12}  {:>12}\n", "input size", "calls", "mean cost", "worst cost");
  for (const auto& p : f.points)
    out << fmt::format(
        "  {:>21}  {:>10}  {:>12}  {:>12}\n",
        p.sizeLow == p.sizeHigh ? fmt::format("{}", p.sizeLow) : fmt::format("{}-{}", p.sizeLow, p.sizeHigh), p.calls,
        compactNumber(p.meanCost), p.worstCost);
}

void renderGrowthRanking(const std::vector<analysis::CostFunction>& ranking, Format format, std::ostream& out) {
  requireTextOrJson(format, "--growth");
  if (format == Format::Json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& f : ranking) {
      auto j = costJson(f);
      j.erase("points");
      j["exponent"] = f.best().b;
      j["model"] = f.best().c == 0 ? "n^b" : "n^b log n";
      all.push_back(j);
    }
    out << dumpJson(all, 2) << "\n";
    return;
  }
  out << fmt::format("{:>8}  {:<10}  {:>7}  {:>6}  {:>10}  {:>8}  {}\n", "exponent", "model", "R^2", "sizes", "calls",
                     "induced", "routine");
  for (const auto& f : ranking)
    out << fmt::format("{:>8.3f}  {:<10}  {:>7.4f}  {:>6}  {:>10}  {:>7.1f}%  {}\n", f.best().b,
                       f.best().c == 0 ? "n^b" : "n^b log n", f.best().r2, f.points.size(), f.calls,
                       100 * f.inducedShare(), f.routine);
}

void renderFootprint(const analysis::FootprintCurves& curves, Format format, std::ostream& out, bool interleaving) {
  requireTextOrJson(format, interleaving ? "--interleaving" : "--footprint");
  if (format == Format::Json) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : curves.points)
      points.push_back({{"length_low", p.lengthLow},
                        {"length_high", p.lengthHigh},
                        {"windows", p.windows},
                        {"p0", p.p0},
                        {"p5", p.p5},
                        {"p50", p.p50},
                        {"p95", p.p95},
                        {"p100", p.p100}});
    out << dumpJson({{"threads", curves.threads}, {"points", points}}, 2) << "\n";
    return;
  }
  if (interleaving)
    out << "All-window interleaving of the main thread and the first thread it started (per window, the smaller of "
           "the two threads' access counts)\n";
  else
    out << fmt::format("All-window footprint (distinct blocks per window) over {} thread(s)\n", curves.threads);
  out << fmt::format("  {:>23}  {:>10}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}\n", "window length", "windows", "0%", "5%",
                     "50%", "95%", "100%");
  for (const auto& p : curves.points)
    out << fmt::format(
        "  {:>23}  {:>10}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}\n",
        p.lengthLow == p.lengthHigh ? fmt::format("{}", p.lengthLow) : fmt::format("{}-{}", p.lengthLow, p.lengthHigh),
        compactNumber(static_cast<double>(p.windows)), compactNumber(p.p0), compactNumber(p.p5), compactNumber(p.p50),
        compactNumber(p.p95), compactNumber(p.p100));
}

void renderMemory(const storage::Database& db, const MemoryRequest& r, Format format, std::ostream& out) {
  namespace mm = metrics::memory;
  if (static_cast<int>(!r.cost.empty()) + static_cast<int>(r.growth) + static_cast<int>(r.footprint) +
          static_cast<int>(r.interleaving) !=
      1)
    throw ViewError("--cost, --growth, --footprint and --interleaving are separate answers: give one");
  if (r.growth) return renderGrowthRanking(analysis::growthRanking(db, r.size, r.minSizes, r.costMetric), format, out);
  if (r.footprint) return renderFootprint(analysis::footprintCurves(db), format, out);
  if (r.interleaving) return renderFootprint(analysis::interleavingCurves(db), format, out, true);
  const auto f = analysis::costFunction(db, r.cost, r.size, r.costMetric);
  if (!f) throw ViewError(fmt::format("--cost {}: no routine of that name with memory-profile values", r.cost));
  if (r.costMetric == mm::CostMetric::Time && f->cost == 0)
    throw ViewError(fmt::format(
        "--cost-metric time: {} has no time values (profiles measured with --no-memory-time or by an older csp-mem)",
        r.cost));
  renderCostFunction(*f, format, out);
}

}  // namespace csp::views
