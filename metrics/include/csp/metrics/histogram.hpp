// Mergeable log-linear ("8-wide") histogram of per-thread integer values, for percentiles.
//
// Bins are fixed for all inputs, so histograms built anywhere merge by element-wise addition
// (commutative and associative, exact). Values 0..15 have a bin each; above that, every
// power-of-two range [2^e, 2^(e+1)) is split into 8 equal sub-bins of width 2^(e-3), so a bin's
// width is at most 1/8 of its lower bound. 496 bins cover all of uint64; storage is sparse.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "csp/metrics/accumulator.hpp"
#include "csp/storage/bytes.hpp"

namespace csp::metrics {

class LogLinearHistogram {
 public:
  static constexpr std::uint32_t kBinCount = 496;

  static std::uint32_t binOf(std::uint64_t value) {
    if (value < 8) return static_cast<std::uint32_t>(value);
    const auto e = static_cast<std::uint32_t>(63 - __builtin_clzll(value));
    return 8 * (e - 2) + static_cast<std::uint32_t>((value >> (e - 3)) & 7);
  }
  static std::uint64_t binLower(std::uint32_t bin);  // smallest value in the bin
  static std::uint64_t binUpper(std::uint32_t bin);  // largest value in the bin (inclusive)

  // Adds `times` occurrences of `value`. Zeros are accepted (a present zero); absent profiles are
  // not added here but at query time (see percentile).
  void add(std::uint64_t value, std::uint64_t times = 1);
  void merge(const LogLinearHistogram& other);

  std::uint64_t total() const { return total_; }

  // The value at percentile p in [0, 100] by the nearest-rank rule (the smallest value v with at
  // least ceil(p/100 * M) of the M values <= v; p = 0 gives the minimum), reported as the
  // midpoint of v's bin, hence exact for values below 16 and within 1/16 relative above.
  // `population` is M: total() for the present population, instances x N for "all", in which
  // case population - total() absent zeros are counted. Returns NaN when M is 0; throws
  // std::invalid_argument if p is out of range or population < total().
  double percentile(double p, std::uint64_t population) const;
  double percentile(double p) const { return percentile(p, total_); }
  // The bin holding that value, for callers that want the bounds.
  std::uint32_t percentileBin(double p, std::uint64_t population) const;

  // (bin, count) pairs in increasing bin order, counts > 0.
  const std::vector<std::pair<std::uint32_t, std::uint64_t>>& bins() const { return bins_; }

  bool operator==(const LogLinearHistogram&) const = default;

 private:
  friend class AccumulatorCodec;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> bins_;
  std::uint64_t total_ = 0;
};

// value / period, exact (the floor), for the sample counts a histogram holds.
using PeriodDivisor = storage::ExactDivisor;

// A histogram being filled one value at a time (summaries of many profiles): the counts of the
// contiguous range of bins seen so far, dense, so that adding is an index and an increment where
// LogLinearHistogram::add searches and inserts. The values of one node and metric usually fall
// in a few dozen neighbouring bins.
class HistogramBuilder {
 public:
  void add(std::uint64_t value) {
    const std::uint32_t bin = LogLinearHistogram::binOf(value);
    if (bin - first_ < counts_.size())
      ++counts_[bin - first_];
    else
      widen(bin);
  }
  // add(divisor.divide(v)) for each v of `values`, with the builder's range held in locals
  // through the loop (a block of a node's values in csp-prof-mpi).
  void addDivided(std::span<const std::uint64_t> values, const PeriodDivisor& divisor) {
    std::uint32_t first = first_;
    std::uint32_t* counts = counts_.data();
    std::size_t size = counts_.size();
    for (const std::uint64_t value : values) {
      const std::uint32_t bin = LogLinearHistogram::binOf(divisor.divide(value));
      if (bin - first < size) {
        ++counts[bin - first];
        continue;
      }
      widen(bin);
      first = first_, counts = counts_.data(), size = counts_.size();
    }
  }
  bool empty() const { return counts_.empty(); }
  LogLinearHistogram histogram() const;

 private:
  void widen(std::uint32_t bin);       // takes `bin` into the range, counting one value there
  std::uint32_t first_ = 0;            // bin of counts_[0]
  std::vector<std::uint32_t> counts_;  // one value per profile: fewer than 2^32 (ProfileId)
};

// Fills s.p5 .. s.p95 and s.imbalanceMedian (s.max / s.p50) from the histogram of a node's
// per-thread values divided by `unit` (the metric's period: values are count x period, so the
// histogram holds sample counts, which are exact below 16). `population` as for percentile():
// s.inputs. Leaves NaN for an empty population.
void addPercentiles(Statistics& s, const LogLinearHistogram& histogram, std::uint64_t population, double unit);

}  // namespace csp::metrics
