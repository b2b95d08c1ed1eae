#include "csp/metrics/scaling.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace csp::metrics {

void validate(const ScalingStudy& study) {
  if (!(study.p > 0) || !(study.q > 0) || !std::isfinite(study.p) || !std::isfinite(study.q))
    throw std::invalid_argument("scaling study: process counts must be positive");
}

double scalingExcess(const ScalingStudy& study, double sumP, double sumQ) {
  validate(study);
  if (study.mode == ScalingMode::Strong) return sumQ - sumP;
  return sumQ / study.q - sumP / study.p;
}

double scalingLossPercent(const ScalingStudy& study, double excess) {
  validate(study);
  const double reference = study.mode == ScalingMode::Strong ? study.rootSumQ : study.rootSumQ / study.q;
  if (reference == 0) return std::numeric_limits<double>::quiet_NaN();
  return 100.0 * excess / reference;
}

double samplingErrorBound(std::uint64_t presentProfiles, std::uint64_t period) {
  if (period == 0) throw std::invalid_argument("sampling error: period 0");
  return static_cast<double>(presentProfiles) * static_cast<double>(period - 1);
}

bool withinSamplingNoise(const ScalingStudy& study, double excess, double boundP, double boundQ) {
  validate(study);
  const double noise = study.mode == ScalingMode::Strong ? boundP + boundQ : boundP / study.p + boundQ / study.q;
  return std::fabs(excess) <= noise;
}

double statisticError(const Statistics& s, Statistic statistic, double e) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(e)) return nan;
  switch (statistic) {
    case Statistic::Count:
      return 0;
    case Statistic::Sum:
      return static_cast<double>(s.count) * e;
    case Statistic::Mean:
      return s.inputs ? static_cast<double>(s.count) * e / static_cast<double>(s.inputs) : nan;
    case Statistic::Min:
    case Statistic::Max:
    case Statistic::Stddev:
    case Statistic::P5:
    case Statistic::P25:
    case Statistic::P50:
    case Statistic::P75:
    case Statistic::P95:
      return s.inputs ? e : nan;
    case Statistic::Cfvar:
    case Statistic::Imbalance:
    case Statistic::ImbalanceMedian:
      return nan;
  }
  return nan;
}

bool withinSamplingError(const Statistics& s, Statistic statistic, double e) {
  if (std::isnan(e) || s.inputs == 0) return false;
  if (statistic == Statistic::Imbalance)
    return !std::isnan(s.imbalance) &&
           s.max - e <= s.mean + static_cast<double>(s.count) * e / static_cast<double>(s.inputs);
  if (statistic == Statistic::ImbalanceMedian) return !std::isnan(s.imbalanceMedian) && s.max - e <= s.p50 + e;
  return false;
}

}  // namespace csp::metrics
