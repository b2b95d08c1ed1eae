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
  const double noise =
      study.mode == ScalingMode::Strong ? boundP + boundQ : boundP / study.p + boundQ / study.q;
  return std::fabs(excess) <= noise;
}

}  // namespace csp::metrics
