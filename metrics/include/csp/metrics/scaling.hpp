// Scaling-loss arithmetic for comparing a run on p processes with one on q > p (docs/diff.md),
// and the sampling-error test that marks differences too small to mean anything (thesis App. A).
// Sums are over all profiles of a run (the "sum" statistic, exact in the accumulators).
#pragma once

#include <cstdint>

#include "csp/metrics/accumulator.hpp"

namespace csp::metrics {

enum class ScalingMode : std::uint8_t {
  Strong = 0,  // same total problem: ideal is equal total cost
  Weak = 1,    // same problem per process: ideal is equal cost per process
};

struct ScalingStudy {
  ScalingMode mode = ScalingMode::Strong;
  double p = 1;         // processes (or threads...) of the smaller run
  double q = 1;         // of the larger run
  double rootSumQ = 0;  // sum of the metric at the root (inclusive) of the q run
};

// Throws std::invalid_argument unless 0 < p and 0 < q (p < q is not required: a user may
// compare in either direction).
void validate(const ScalingStudy& study);

// Strong: sumQ - sumP.  Weak: sumQ/q - sumP/p. A node missing from one run has sum 0 there.
double scalingExcess(const ScalingStudy& study, double sumP, double sumQ);

// 100 * excess / sumQ(root) (strong) or 100 * excess / (sumQ(root)/q) (weak). Negative values
// are gains; values above 100 at one node are legitimate (gains elsewhere). NaN if the root sum
// is 0.
double scalingLossPercent(const ScalingStudy& study, double excess);

// Worst-case error of a sampled sum (thesis Eq. A.10): each profile's estimate n_c * period is
// within period - 1 of the true value, and the errors of the `presentProfiles` profiles holding
// the node add up. Counted (exact) metrics pass period 1 and get 0. Relative to the sum this is
// about presentProfiles / samples: the "good to +-1/n" rule for one profile.
double samplingErrorBound(std::uint64_t presentProfiles, std::uint64_t period);

// Whether an excess is within sampling noise: |excess| <= the bound of the difference, i.e.
// boundP + boundQ (strong) or boundP/p + boundQ/q (weak), where boundP/boundQ come from
// samplingErrorBound for the node in each run. Conservative: a worst-case, not a statistical,
// bound, so "significant" means the difference cannot be explained by sampling alone.
bool withinSamplingNoise(const ScalingStudy& study, double excess, double boundP, double boundQ);

// Worst-case sampling error of a finalized statistic when every present per-thread value is
// within `perThread` (period - 1 for a sampled metric, 0 for a counted one) of the truth: sum
// count·e, mean count·e / inputs, min, max, percentiles and stddev e (a population standard
// deviation moves by at most the largest per-value change), count 0; NaN for ratios (cfvar,
// imbalance, imbmedian), which withinSamplingError judges instead, and for NaN perThread.
double statisticError(const Statistics& s, Statistic statistic, double perThread);
// Whether an imbalance (max / mean, or max / median for imbmedian) could be 1 -- no imbalance at
// all -- within sampling error: (max - e) <= (mean + count·e / inputs), resp. (max - e) <= (p50 +
// e). False for other statistics and for NaN perThread.
bool withinSamplingError(const Statistics& s, Statistic statistic, double perThread);

}  // namespace csp::metrics
