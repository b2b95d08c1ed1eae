// Summary accumulators over the per-thread values of one (node, metric, scope): the four-stage
// algebra of docs/design.md, "Data model" (thesis Alg. 7.1, Figs. 7.2-7.4, 7.7).
//
//   IntAccumulator acc;                  // initialize
//   acc.accumulate(profile, value);      // once per profile holding the node
//   acc.combine(partialFromElsewhere);   // any order, any grouping
//   Statistics s = acc.finalize(N, Population::All);
//
// Never combine finalized values: Statistics are for display only. The exact semantics of every
// field, of both populations and of combined (Flat/Callers) nodes are in docs/metrics.md.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "csp/storage/profile.hpp"  // kNoIndex

namespace csp::metrics {

__extension__ using Uint128 = unsigned __int128;
// Decimal digits of an exact 128-bit sum, for renderers (iostreams and fmt cannot print it).
std::string toDecimalString(Uint128 value);
// A value for reading, as renderers show it: below 1000 with 4 significant digits ("12.35"),
// above with 3 and an SI suffix ("1.35G"); NaN gives "".
std::string compactNumber(double value);
// A quantity of `unit` for people: nanoseconds as time in the unit that reads best ("1.92 s",
// "35 ms", "120 µs", "800 ns"); anything else as compactNumber.
std::string formatQuantity(double value, std::string_view unit);

// Which profiles a statistic is taken over.
enum class Population : std::uint8_t {
  All = 0,      // every profile counts; a profile where the node is absent contributes 0
  Present = 1,  // only the profiles where the node is present
};
const char* toString(Population population);

// Finalized, display-only statistics. Undefined values (an empty population, a ratio over a zero
// mean) are NaN so that renderers can show them blank instead of a misleading 0.
struct Statistics {
  std::uint64_t inputs = 0;  // size of the population: instances x N (All) or count (Present)
  std::uint64_t count = 0;   // (instance, profile) pairs where the node is present
  double sum = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double stddev = 0;                // population standard deviation (divides by `inputs`, not inputs - 1)
  double cfvar = 0;                 // stddev / mean
  double imbalance = 0;             // max / mean
  std::uint32_t argmin = kNoIndex;  // smallest profile id holding min; kNoIndex if an absent one does
  std::uint32_t argmax = kNoIndex;  // smallest profile id holding max; kNoIndex if an absent one does
  // Percentiles by the nearest-rank rule over the same population, and max / median. Filled from
  // a LogLinearHistogram (addPercentiles, histogram.hpp); NaN where no histogram was kept (real
  // metrics, databases before format 1.4) or the median is 0.
  double p5 = std::numeric_limits<double>::quiet_NaN();
  double p25 = std::numeric_limits<double>::quiet_NaN();
  double p50 = std::numeric_limits<double>::quiet_NaN();
  double p75 = std::numeric_limits<double>::quiet_NaN();
  double p95 = std::numeric_limits<double>::quiet_NaN();
  double imbalanceMedian = std::numeric_limits<double>::quiet_NaN();
  // Integer metrics (IntAccumulator) only: sum, min and max exactly, where the doubles above
  // round beyond 2^53 (exports print these); min and max are absent where undefined.
  std::optional<Uint128> exactSum;
  std::optional<std::uint64_t> exactMin, exactMax;
};

// One field of Statistics, as views select and formulas name them.
enum class Statistic : std::uint8_t {
  Count,
  Sum,
  Mean,
  Min,
  Max,
  Stddev,
  Cfvar,
  Imbalance,
  P5,
  P25,
  P50,
  P75,
  P95,
  ImbalanceMedian
};
inline constexpr Statistic kStatistics[] = {Statistic::Count, Statistic::Sum,
                                            Statistic::Mean,  Statistic::Min,
                                            Statistic::Max,   Statistic::Stddev,
                                            Statistic::Cfvar, Statistic::Imbalance,
                                            Statistic::P5,    Statistic::P25,
                                            Statistic::P50,   Statistic::P75,
                                            Statistic::P95,   Statistic::ImbalanceMedian};
// The canonical name: count sum mean min max stddev cfvar imbalance p5 p25 p50 p75 p95 imbmedian.
const char* toString(Statistic statistic);
bool isPercentile(Statistic statistic);  // p5 .. p95
// A canonical name or one of the short forms std, sd, cv, imb, median (p50), imbm (imbmedian).
std::optional<Statistic> parseStatistic(std::string_view text);
double valueOf(const Statistics& statistics, Statistic statistic);
// The statistic as an exact integer: count always, sum, min and max of integer metrics; nullopt
// for the others (real-valued statistics or metrics).
std::optional<Uint128> exactValueOf(const Statistics& statistics, Statistic statistic);

// Exact accumulator for raw integer metric values (count x period). Every field is an integer,
// so combine is commutative and associative bit for bit: the same inputs give the same bytes
// whatever the partitioning over processes and threads.
//
// Width: values are < 2^64, so the sum of n values is < n * 2^64 and fits 128 bits for any
// n < 2^64; the sum of squares is < n * 2^128 and is kept in 192 bits (a 128-bit low part plus a
// 64-bit high part), exact for any n < 2^64. Nothing saturates.
//
// "Present" means a non-zero value: per-thread values are stored sparsely without zeros, so a
// zero cannot be told from absence downstream; accumulate() ignores it.
namespace detail {
// Min and max with the profile holding them. Ties go to the smaller profile id so that the
// result does not depend on the grouping (one value is a partial of min = max = value).
template <typename T>
void mergeExtremes(T& min, std::uint32_t& argmin, T& max, std::uint32_t& argmax, T otherMin, std::uint32_t otherArgmin,
                   T otherMax, std::uint32_t otherArgmax) {
  if (otherMin < min || (otherMin == min && otherArgmin < argmin)) {
    min = otherMin;
    argmin = otherArgmin;
  }
  if (otherMax > max || (otherMax == max && otherArgmax < argmax)) {
    max = otherMax;
    argmax = otherArgmax;
  }
}
}  // namespace detail

class IntAccumulator {
 public:
  // A fresh accumulator stands for one CCT node (one instance).
  IntAccumulator() = default;

  // The starting point of a Flat/Callers node: zero instances, to be fed with combineInstance().
  static IntAccumulator forCombinedNode();

  // Inline: csp-prof-mpi calls it for every per-thread value, twice when thread classes are kept.
  void accumulate(std::uint32_t profile, std::uint64_t value) {
    if (profile == kNoIndex) refuseReservedProfile();
    if (value == 0) return;
    addMoments(value);
    detail::mergeExtremes(min_, argmin_, max_, argmax_, value, profile, value, profile);
  }

  // accumulate() for a caller that gives each accumulator its profiles in ascending id order, each
  // once, none of them kNoIndex (csp-prof-mpi's summaries): a value equal to an extreme already
  // held comes from a larger id, which never takes it over, so no tie is compared.
  void accumulateAscending(std::uint32_t profile, std::uint64_t value) {
    if (value == 0) return;
    addMoments(value);
    if (value < min_ || count_ == 1) min_ = value, argmin_ = profile;
    if (value > max_) max_ = value, argmax_ = profile;
  }

  // accumulateAscending() for each profile of a run (ascending ids) and its value, with the
  // accumulator held in locals through the loop (a block of a node's values in csp-prof-mpi).
  void accumulateAscending(std::span<const std::uint32_t> profiles, std::span<const std::uint64_t> values) {
    std::uint64_t count = count_, sumSqHigh = sumSqHigh_, min = min_, max = max_;
    Uint128 sum = sum_, sumSqLow = sumSqLow_;
    std::uint32_t argmin = argmin_, argmax = argmax_;
    for (std::size_t k = 0; k < values.size(); ++k) {
      const std::uint64_t value = values[k];
      if (value == 0) continue;
      addMoments(count, sum, sumSqLow, sumSqHigh, value);
      if (value < min || count == 1) min = value, argmin = profiles[k];
      if (value > max) max = value, argmax = profiles[k];
    }
    count_ = count, sumSqHigh_ = sumSqHigh, min_ = min, max_ = max;
    sum_ = sum, sumSqLow_ = sumSqLow;
    argmin_ = argmin, argmax_ = argmax;
  }

  // Merges a partial over other profiles of the same CCT instances. Throws std::invalid_argument
  // if the instance counts differ (that would be combineInstance's job).
  void combine(const IntAccumulator& other);

  // Merges the accumulator of another CCT node into a Flat/Callers node (thesis Fig. 7.7): as
  // combine(), but the instance counts add up.
  void combineInstance(const IntAccumulator& other);

  // `profiles` is N, the number of profiles of the run (not multiplied by instances).
  Statistics finalize(std::uint64_t profiles, Population population) const;

  std::uint64_t count() const { return count_; }
  std::uint64_t instances() const { return instances_; }
  Uint128 sum() const { return sum_; }
  Uint128 sumSquaresLow() const { return sumSqLow_; }
  std::uint64_t sumSquaresHigh() const { return sumSqHigh_; }
  std::uint64_t min() const { return min_; }  // over present values; UINT64_MAX when empty
  std::uint64_t max() const { return max_; }  // over present values; 0 when empty
  std::uint32_t argmin() const { return argmin_; }
  std::uint32_t argmax() const { return argmax_; }

  bool operator==(const IntAccumulator&) const = default;

 private:
  friend class AccumulatorCodec;
  // A present value's share of the count, the sum and the sum of squares (its 192 bits), on the
  // members or on a loop's copies of them.
  static void addMoments(std::uint64_t& count, Uint128& sum, Uint128& sumSqLow, std::uint64_t& sumSqHigh,
                         std::uint64_t value) {
    ++count;
    sum += value;
    const Uint128 square = static_cast<Uint128>(value) * value;
    sumSqLow += square;
    if (sumSqLow < square) ++sumSqHigh;
  }
  void addMoments(std::uint64_t value) { addMoments(count_, sum_, sumSqLow_, sumSqHigh_, value); }
  void merge(const IntAccumulator& other);
  [[noreturn]] static void refuseReservedProfile();

  std::uint64_t count_ = 0;
  std::uint64_t instances_ = 1;
  Uint128 sum_ = 0;
  Uint128 sumSqLow_ = 0;
  std::uint64_t sumSqHigh_ = 0;
  std::uint64_t min_ = UINT64_MAX;
  std::uint64_t max_ = 0;
  std::uint32_t argmin_ = kNoIndex;
  std::uint32_t argmax_ = kNoIndex;
};

// Accumulator for real-valued per-thread inputs (per-thread derived metrics): count, mean and M2
// with the parallel-variance combine of Chan, Golub and LeVeque, which stays accurate where a raw
// sum of squares would cancel.
//
// Determinism: combine is commutative bit for bit (operands are put in a canonical order) but,
// being floating point, not associative: different groupings can differ in the last bits. For
// bit-identical results accumulate values in profile-id order and combine partials in a fixed
// tree over profile-id ranges (docs/metrics.md, "Determinism").
//
// Unlike IntAccumulator every accumulated value is present, zero included. Non-finite values
// are rejected, and so is any accumulate/combine whose mean or M2 would overflow (|values| beyond
// about 1e150): std::overflow_error, the accumulator left unchanged.
class RealAccumulator {
 public:
  RealAccumulator() = default;
  static RealAccumulator forCombinedNode();

  // Throws std::invalid_argument for NaN or infinite values, std::overflow_error (see above).
  void accumulate(std::uint32_t profile, double value);
  void combine(const RealAccumulator& other);  // same instances required, as IntAccumulator
  void combineInstance(const RealAccumulator& other);
  Statistics finalize(std::uint64_t profiles, Population population) const;

  std::uint64_t count() const { return count_; }
  std::uint64_t instances() const { return instances_; }
  double mean() const { return mean_; }  // over present values
  double m2() const { return m2_; }      // sum of squared deviations from mean()
  double min() const { return min_; }    // +inf when empty
  double max() const { return max_; }    // -inf when empty
  std::uint32_t argmin() const { return argmin_; }
  std::uint32_t argmax() const { return argmax_; }

  bool operator==(const RealAccumulator&) const = default;

 private:
  friend class AccumulatorCodec;
  void merge(const RealAccumulator& other);

  std::uint64_t count_ = 0;
  std::uint64_t instances_ = 1;
  double mean_ = 0;
  double m2_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  std::uint32_t argmin_ = kNoIndex;
  std::uint32_t argmax_ = kNoIndex;
};

}  // namespace csp::metrics
