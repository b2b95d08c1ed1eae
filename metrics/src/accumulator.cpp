#include "csp/metrics/accumulator.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace csp::metrics {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Just enough 256-bit unsigned arithmetic for the exact variance numerator M*S2 - S1^2, where
// M < 2^64, S2 < 2^192 and S1 < 2^128. Little-endian limbs.
using U256 = std::array<std::uint64_t, 4>;

U256 fromParts(Uint128 low, std::uint64_t high) {
  return {static_cast<std::uint64_t>(low), static_cast<std::uint64_t>(low >> 64), high, 0};
}

// Product truncated to 256 bits; callers guarantee it fits.
U256 multiply(const U256& a, const U256& b) {
  U256 r{};
  for (std::size_t i = 0; i < 4; ++i) {
    Uint128 carry = 0;
    for (std::size_t j = 0; i + j < 4; ++j) {
      const Uint128 t = static_cast<Uint128>(a[i]) * b[j] + r[i + j] + carry;
      r[i + j] = static_cast<std::uint64_t>(t);
      carry = t >> 64;
    }
  }
  return r;
}

// a - b for a >= b.
U256 subtract(const U256& a, const U256& b) {
  U256 r{};
  std::uint64_t borrow = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const std::uint64_t d = a[i] - b[i];
    const std::uint64_t nextBorrow = (a[i] < b[i]) || (d < borrow) ? 1 : 0;
    r[i] = d - borrow;
    borrow = nextBorrow;
  }
  return r;
}

long double toLongDouble(const U256& a) {
  long double r = 0;
  for (std::size_t i = 4; i-- > 0;) r = r * 18446744073709551616.0L + static_cast<long double>(a[i]);
  return r;
}

long double toLongDouble(Uint128 a) {
  return static_cast<long double>(static_cast<std::uint64_t>(a >> 64)) * 18446744073709551616.0L +
         static_cast<long double>(static_cast<std::uint64_t>(a));
}

std::uint64_t populationSize(std::uint64_t count, std::uint64_t instances, std::uint64_t profiles,
                             Population population) {
  if (population == Population::Present) return count;
  std::uint64_t all = 0;
  if (__builtin_mul_overflow(instances, profiles, &all))
    throw std::invalid_argument("finalize: instances x profiles overflows 64 bits");
  if (all < count) throw std::invalid_argument("finalize: fewer profiles than values accumulated (wrong N?)");
  return all;
}

void fillRatios(Statistics& s) {
  s.cfvar = s.mean != 0 ? s.stddev / s.mean : kNaN;
  s.imbalance = s.mean != 0 ? s.max / s.mean : kNaN;
}

void setUndefined(Statistics& s) {
  s.mean = s.min = s.max = s.stddev = s.cfvar = s.imbalance = kNaN;
  s.argmin = s.argmax = kNoIndex;
}

void requireSameInstances(std::uint64_t a, std::uint64_t b) {
  if (a != b)
    throw std::invalid_argument("combine: partial accumulators of different instance counts; use combineInstance");
}

}  // namespace

std::string toDecimalString(Uint128 value) {
  std::string digits;
  do {
    digits.push_back(static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return {digits.rbegin(), digits.rend()};
}

std::string compactNumber(double value) {
  if (std::isnan(value)) return "";
  char text[64];
  if (std::fabs(value) < 1e3) {
    std::snprintf(text, sizeof text, "%.4g", value);
    return text;
  }
  static const char* suffix[] = {"k", "M", "G", "T", "P", "E"};
  double scaled = value / 1e3;
  std::size_t i = 0;
  // 999,999 rounds to 1000k at three digits: the next suffix then ("1M").
  while (std::fabs(scaled) >= 999.5 && i + 1 < std::size(suffix)) scaled /= 1e3, ++i;
  std::snprintf(text, sizeof text, "%.3g%s", scaled, suffix[i]);
  return text;
}

std::string formatQuantity(double value, std::string_view unit) {
  if (std::isnan(value)) return "";
  if (unit != "ns" || value == 0) return compactNumber(value);
  const double a = std::fabs(value);
  char text[64];
  if (a >= 999.5e9) {
    std::snprintf(text, sizeof text, "%.0f s", value / 1e9);
  } else {
    // The largest unit in which the value is at least 1 (after rounding to three digits).
    static const struct {
      double scale;
      const char* name;
    } units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "\u00b5s"}, {1, "ns"}};
    std::size_t u = 0;
    while (u + 1 < std::size(units) && a < 0.9995 * units[u].scale) ++u;
    std::snprintf(text, sizeof text, "%.3g %s", value / units[u].scale, units[u].name);
  }
  return text;
}

const char* toString(Population population) { return population == Population::All ? "all" : "present"; }

// ---------------------------------------------------------------------------------------------
// IntAccumulator

IntAccumulator IntAccumulator::forCombinedNode() {
  IntAccumulator a;
  a.instances_ = 0;
  return a;
}

void IntAccumulator::refuseReservedProfile() {
  throw std::invalid_argument("accumulate: profile id kNoIndex is reserved");
}

void IntAccumulator::merge(const IntAccumulator& other) {
  count_ += other.count_;
  sum_ += other.sum_;
  sumSqLow_ += other.sumSqLow_;
  sumSqHigh_ += other.sumSqHigh_ + (sumSqLow_ < other.sumSqLow_ ? 1 : 0);
  detail::mergeExtremes(min_, argmin_, max_, argmax_, other.min_, other.argmin_, other.max_, other.argmax_);
}

void IntAccumulator::combine(const IntAccumulator& other) {
  requireSameInstances(instances_, other.instances_);
  merge(other);
}

void IntAccumulator::combineInstance(const IntAccumulator& other) {
  merge(other);
  instances_ += other.instances_;
}

Statistics IntAccumulator::finalize(std::uint64_t profiles, Population population) const {
  Statistics s;
  s.count = count_;
  s.inputs = populationSize(count_, instances_, profiles, population);
  s.sum = static_cast<double>(toLongDouble(sum_));
  s.exactSum = sum_;
  if (s.inputs == 0) {
    setUndefined(s);
    return s;
  }
  const long double m = static_cast<long double>(s.inputs);
  s.mean = static_cast<double>(toLongDouble(sum_) / m);

  // Exact numerator, one rounding at the end: var = (M*S2 - S1^2) / M^2.
  const U256 s1 = fromParts(sum_, 0);
  const U256 numerator =
      subtract(multiply(U256{s.inputs, 0, 0, 0}, fromParts(sumSqLow_, sumSqHigh_)), multiply(s1, s1));
  s.stddev = static_cast<double>(std::sqrt(toLongDouble(numerator) / m / m));

  const bool hasAbsent = count_ < s.inputs;  // only possible for Population::All
  if (hasAbsent) {
    s.min = 0;
    s.argmin = kNoIndex;  // some absent profile; which one is not recorded
  } else {
    s.min = static_cast<double>(min_);
    s.argmin = argmin_;
  }
  if (count_ == 0) {
    s.max = 0;
    s.argmax = kNoIndex;
  } else {
    s.max = static_cast<double>(max_);
    s.argmax = argmax_;
  }
  s.exactMin = hasAbsent ? 0 : min_;
  s.exactMax = count_ == 0 ? 0 : max_;
  fillRatios(s);
  return s;
}

// ---------------------------------------------------------------------------------------------
// RealAccumulator

RealAccumulator RealAccumulator::forCombinedNode() {
  RealAccumulator a;
  a.instances_ = 0;
  return a;
}

void RealAccumulator::accumulate(std::uint32_t profile, double value) {
  if (profile == kNoIndex) throw std::invalid_argument("accumulate: profile id kNoIndex is reserved");
  if (!std::isfinite(value)) throw std::invalid_argument("accumulate: value is not finite");
  RealAccumulator one;
  one.count_ = 1;
  one.mean_ = value;
  one.min_ = one.max_ = value;
  one.argmin_ = one.argmax_ = profile;
  merge(one);
}

void RealAccumulator::merge(const RealAccumulator& other) {
  if (other.count_ != 0) {
    if (count_ == 0) {
      count_ = other.count_;
      mean_ = other.mean_;
      m2_ = other.m2_;
    } else {
      // Chan et al. Written symmetrically in the two operands (a*b + c*d, delta squared) so
      // that combine(x, y) and combine(y, x) round identically.
      const double na = static_cast<double>(count_);
      const double nb = static_cast<double>(other.count_);
      const double n = na + nb;
      const double delta = other.mean_ - mean_;
      const double mean = (na * mean_ + nb * other.mean_) / n;
      const double m2 = (m2_ + other.m2_) + delta * delta * (na * nb / n);
      // Only values beyond ~1e150 get here; refusing keeps the state valid and encodable.
      if (!std::isfinite(mean) || !std::isfinite(m2))
        throw std::overflow_error("real accumulator: mean or M2 overflows a double");
      mean_ = mean;
      m2_ = m2;
      count_ += other.count_;
    }
  }
  detail::mergeExtremes(min_, argmin_, max_, argmax_, other.min_, other.argmin_, other.max_, other.argmax_);
}

void RealAccumulator::combine(const RealAccumulator& other) {
  requireSameInstances(instances_, other.instances_);
  merge(other);
}

void RealAccumulator::combineInstance(const RealAccumulator& other) {
  merge(other);
  instances_ += other.instances_;
}

Statistics RealAccumulator::finalize(std::uint64_t profiles, Population population) const {
  Statistics s;
  s.count = count_;
  s.inputs = populationSize(count_, instances_, profiles, population);
  if (s.inputs == 0) {
    s.sum = 0;
    setUndefined(s);
    return s;
  }
  const double n = static_cast<double>(count_);
  const double m = static_cast<double>(s.inputs);
  s.sum = mean_ * n;
  double m2 = m2_;
  const std::uint64_t absent = s.inputs - count_;
  if (absent == 0) {
    s.mean = mean_;
  } else {
    // The absent zeros form one more group of mean 0 and M2 0 (the same Chan step).
    s.mean = mean_ * n / m;
    m2 += mean_ * mean_ * (n * static_cast<double>(absent) / m);
  }
  s.stddev = std::sqrt(m2 / m);

  s.min = min_;
  s.argmin = argmin_;
  s.max = max_;
  s.argmax = argmax_;
  if (absent != 0) {
    // Ties with an absent zero report kNoIndex: the absent profile may have the smaller id.
    if (count_ == 0 || min_ >= 0) {
      s.min = 0;
      s.argmin = kNoIndex;
    }
    if (count_ == 0 || max_ <= 0) {
      s.max = 0;
      s.argmax = kNoIndex;
    }
  }
  fillRatios(s);
  return s;
}

const char* toString(Statistic statistic) {
  switch (statistic) {
    case Statistic::Count:
      return "count";
    case Statistic::Sum:
      return "sum";
    case Statistic::Mean:
      return "mean";
    case Statistic::Min:
      return "min";
    case Statistic::Max:
      return "max";
    case Statistic::Stddev:
      return "stddev";
    case Statistic::Cfvar:
      return "cfvar";
    case Statistic::Imbalance:
      return "imbalance";
    case Statistic::P5:
      return "p5";
    case Statistic::P25:
      return "p25";
    case Statistic::P50:
      return "p50";
    case Statistic::P75:
      return "p75";
    case Statistic::P95:
      return "p95";
    case Statistic::ImbalanceMedian:
      return "imbmedian";
  }
  return "?";
}

bool isPercentile(Statistic statistic) {
  return statistic == Statistic::P5 || statistic == Statistic::P25 || statistic == Statistic::P50 ||
         statistic == Statistic::P75 || statistic == Statistic::P95;
}

std::optional<Statistic> parseStatistic(std::string_view text) {
  for (auto s : kStatistics)
    if (text == toString(s)) return s;
  if (text == "std" || text == "sd") return Statistic::Stddev;
  if (text == "cv") return Statistic::Cfvar;
  if (text == "imb") return Statistic::Imbalance;
  if (text == "median") return Statistic::P50;
  if (text == "imbm") return Statistic::ImbalanceMedian;
  return std::nullopt;
}

std::optional<Uint128> exactValueOf(const Statistics& s, Statistic statistic) {
  switch (statistic) {
    case Statistic::Count:
      return s.count;
    case Statistic::Sum:
      return s.exactSum;
    case Statistic::Min:
      return s.exactMin;
    case Statistic::Max:
      return s.exactMax;
    default:
      return std::nullopt;
  }
}

double valueOf(const Statistics& s, Statistic statistic) {
  switch (statistic) {
    case Statistic::Count:
      return static_cast<double>(s.count);
    case Statistic::Sum:
      return s.sum;
    case Statistic::Mean:
      return s.mean;
    case Statistic::Min:
      return s.min;
    case Statistic::Max:
      return s.max;
    case Statistic::Stddev:
      return s.stddev;
    case Statistic::Cfvar:
      return s.cfvar;
    case Statistic::Imbalance:
      return s.imbalance;
    case Statistic::P5:
      return s.p5;
    case Statistic::P25:
      return s.p25;
    case Statistic::P50:
      return s.p50;
    case Statistic::P75:
      return s.p75;
    case Statistic::P95:
      return s.p95;
    case Statistic::ImbalanceMedian:
      return s.imbalanceMedian;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace csp::metrics
