#include "csp/metrics/histogram.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace csp::metrics {

// Bin layout (binOf, in the header): bins 0..7 hold the values 0..7. For e >= 3, the range [2^e, 2^(e+1)) takes bins
// 8(e-2) .. 8(e-2)+7, sub-bin (value >> (e-3)) & 7. So e = 3 (values 8..15) is still exact, and
// e = 63 ends at bin 8*61+7 = 495.
std::uint64_t LogLinearHistogram::binLower(std::uint32_t bin) {
  if (bin >= kBinCount) throw std::out_of_range("histogram bin out of range");
  if (bin < 8) return bin;
  const std::uint32_t e = bin / 8 + 2;
  return (std::uint64_t{8} + (bin & 7)) << (e - 3);
}

std::uint64_t LogLinearHistogram::binUpper(std::uint32_t bin) {
  if (bin >= kBinCount) throw std::out_of_range("histogram bin out of range");
  if (bin < 8) return bin;
  const std::uint32_t e = bin / 8 + 2;
  return binLower(bin) + ((std::uint64_t{1} << (e - 3)) - 1);
}

void LogLinearHistogram::add(std::uint64_t value, std::uint64_t times) {
  if (times == 0) return;
  if (total_ + times < total_) throw std::overflow_error("histogram count overflows 64 bits");
  const std::uint32_t bin = binOf(value);
  auto it = std::lower_bound(bins_.begin(), bins_.end(), bin,
                             [](const auto& entry, std::uint32_t b) { return entry.first < b; });
  if (it != bins_.end() && it->first == bin)
    it->second += times;
  else
    bins_.insert(it, {bin, times});
  total_ += times;
}

namespace {

// Bins present in both of two sorted (bin, count) lists.
std::size_t sharedBins(const std::vector<std::pair<std::uint32_t, std::uint64_t>>& x,
                       const std::vector<std::pair<std::uint32_t, std::uint64_t>>& y) {
  std::size_t both = 0;
  for (auto a = x.begin(), b = y.begin(); a != x.end() && b != y.end();) {
    if (a->first < b->first) {
      ++a;
    } else if (b->first < a->first) {
      ++b;
    } else {
      ++both;
      ++a;
      ++b;
    }
  }
  return both;
}

}  // namespace

void LogLinearHistogram::merge(const LogLinearHistogram& other) {
  if (total_ + other.total_ < total_) throw std::overflow_error("histogram count overflows 64 bits");
  std::vector<std::pair<std::uint32_t, std::uint64_t>> merged;
  // Exactly as large as the union: a process keeps the merged histograms of its nodes until they
  // are written, and reserving the sum of both sizes left up to half of each unused.
  merged.reserve(bins_.size() + other.bins_.size() - sharedBins(bins_, other.bins_));
  auto a = bins_.begin();
  auto b = other.bins_.begin();
  while (a != bins_.end() || b != other.bins_.end()) {
    if (b == other.bins_.end() || (a != bins_.end() && a->first < b->first)) {
      merged.push_back(*a++);
    } else if (a == bins_.end() || b->first < a->first) {
      merged.push_back(*b++);
    } else {
      merged.emplace_back(a->first, a->second + b->second);
      ++a;
      ++b;
    }
  }
  bins_ = std::move(merged);
  total_ += other.total_;
}

std::uint32_t LogLinearHistogram::percentileBin(double p, std::uint64_t population) const {
  if (!(p >= 0 && p <= 100)) throw std::invalid_argument("percentile: p must be in [0, 100]");
  if (population < total_) throw std::invalid_argument("percentile: population smaller than the values recorded");
  if (population == 0) throw std::invalid_argument("percentile: empty population");
  // Nearest rank in [1, M]. Computed in long double so that p = 100 reaches M exactly.
  auto rank = static_cast<std::uint64_t>(
      std::ceil(static_cast<long double>(p) / 100.0L * static_cast<long double>(population)));
  rank = std::clamp<std::uint64_t>(rank, 1, population);

  std::uint64_t seen = population - total_;  // the absent zeros come first: they are in bin 0
  if (seen >= rank) return 0;
  for (const auto& [bin, count] : bins_) {
    seen += count;
    if (seen >= rank) return bin;
  }
  return bins_.back().first;  // unreachable: seen ends at population >= rank
}

void addPercentiles(Statistics& s, const LogLinearHistogram& histogram, std::uint64_t population, double unit) {
  if (population == 0 || population < histogram.total()) return;
  double* fields[] = {&s.p5, &s.p25, &s.p50, &s.p75, &s.p95};
  const double ps[] = {5, 25, 50, 75, 95};
  for (std::size_t i = 0; i < 5; ++i) *fields[i] = histogram.percentile(ps[i], population) * unit;
  s.imbalanceMedian = s.p50 > 0 ? s.max / s.p50 : std::numeric_limits<double>::quiet_NaN();
}

double LogLinearHistogram::percentile(double p, std::uint64_t population) const {
  if (population == 0 && p >= 0 && p <= 100 && total_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const std::uint32_t bin = percentileBin(p, population);
  const auto lo = static_cast<long double>(binLower(bin));
  const auto hi = static_cast<long double>(binUpper(bin));
  return static_cast<double>((lo + hi) / 2);
}

void HistogramBuilder::widen(std::uint32_t bin) {
  if (counts_.empty()) {
    first_ = bin;
    counts_.assign(1, 1);
    return;
  }
  if (bin < first_) {
    counts_.insert(counts_.begin(), first_ - bin, 0);
    first_ = bin;
  } else {
    counts_.resize(bin - first_ + 1, 0);
  }
  ++counts_[bin - first_];
}

LogLinearHistogram HistogramBuilder::histogram() const {
  LogLinearHistogram h;
  for (std::size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i]) h.add(LogLinearHistogram::binLower(first_ + static_cast<std::uint32_t>(i)), counts_[i]);
  return h;
}

}  // namespace csp::metrics
