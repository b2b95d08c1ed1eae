// Memory-access profiles read back from a database (csp-run --memory, docs/memory-profiles.md):
// a routine's empirical cost function (worst-case and mean cost per input-size bin, workload,
// fitted growth), the ranking of routines by growth, and the all-window footprint curves. Data
// only, from the per-thread values of the metric families in csp/metrics/memory_metrics.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "csp/metrics/memory_metrics.hpp"
#include "csp/storage/database.hpp"

namespace csp::analysis {

// One input-size bin of a cost function (all threads, all calling contexts of the routine).
struct CostPoint {
  std::uint32_t bin = 0;
  std::uint64_t sizeLow = 0, sizeHigh = 0;  // the bin's input sizes (cells), inclusive
  double size = 0;                          // its midpoint, the x of fits and plots
  std::uint64_t calls = 0;                  // workload: activations of this size
  double meanCost = 0;                      // instructions, or ns of thread CPU time (CostFunction::costMetric)
  std::uint64_t worstCost = 0;
};

// cost = a * n^b * (log2 n)^c, fitted by least squares on log(cost) = log a + b log n + c log log2 n
// over the worst-case points with n >= 2. c is fixed (0: power law, 1: n^b log n); r2 is the
// coefficient of determination in that log space.
struct GrowthFit {
  double a = 0, b = 0, c = 0, r2 = 0;
  std::size_t points = 0;
  bool valid = false;  // at least 3 points of at least 2 distinct sizes
};

struct CostFunction {
  std::string routine;
  metrics::memory::SizeKind kind = metrics::memory::SizeKind::Trms;
  metrics::memory::CostMetric costMetric = metrics::memory::CostMetric::Instructions;
  std::vector<CostPoint> points;  // increasing size
  // cost: the summed cost of all calls in the cost metric (instructions or ns).
  std::uint64_t calls = 0, cost = 0, trms = 0, rms = 0;
  std::uint64_t inducedThread = 0, inducedKernel = 0;  // induced first reads by source
  std::size_t contexts = 0;                            // calling contexts of the routine
  GrowthFit power, nLogN;
  // The fit with the larger r2 (power on a tie): the model the ranking uses.
  const GrowthFit& best() const { return nLogN.valid && nLogN.r2 > power.r2 ? nLogN : power; }
  double inducedShare() const { return trms ? static_cast<double>(inducedThread + inducedKernel) / trms : 0; }
};

// Fits cost = a n^b log2(n)^c with c fixed; points with size < 2 or cost 0 are left out.
GrowthFit fitGrowth(const std::vector<CostPoint>& points, double c);

// The cost function of every procedure named `routine`; nullopt if no node has that name or the
// database holds no memory-access profile values for it.
// The cost is instructions or, from profiles of format 2, thread CPU time in ns.
std::optional<CostFunction> costFunction(const storage::Database& db, const std::string& routine,
                                         metrics::memory::SizeKind kind,
                                         metrics::memory::CostMetric cost = metrics::memory::CostMetric::Instructions);

// Every routine with a valid fit and at least `minPoints` size bins, by decreasing growth
// exponent of its best fit (then by name).
std::vector<CostFunction> growthRanking(const storage::Database& db, metrics::memory::SizeKind kind,
                                        std::size_t minPoints,
                                        metrics::memory::CostMetric cost = metrics::memory::CostMetric::Instructions);

// One window-length bin of the footprint curves, over the windows of all threads (the curves of
// one thread when the database holds one): percentiles of the footprint, in blocks, by the
// nearest-rank rule, each reported as its bin's midpoint (exact below 16).
struct FootprintPoint {
  std::uint32_t lengthBin = 0;
  std::uint64_t lengthLow = 0, lengthHigh = 0;  // window lengths (accesses), inclusive
  std::uint64_t windows = 0;
  double p0 = 0, p5 = 0, p50 = 0, p95 = 0, p100 = 0;
};
struct FootprintCurves {
  std::vector<FootprintPoint> points;  // increasing length
  std::uint64_t threads = 0;           // profiles holding footprint windows
};
FootprintCurves footprintCurves(const storage::Database& db);
// The same curves for the interleaving of the main thread and the first thread it started
// (values: min of the two threads' accesses in a window).
FootprintCurves interleavingCurves(const storage::Database& db);

}  // namespace csp::analysis
