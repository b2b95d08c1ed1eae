#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>

#include "csp/metrics/histogram.hpp"

using namespace csp::metrics;
using H = LogLinearHistogram;

TEST(Histogram, SmallValuesHaveExactBins) {
  for (std::uint64_t v = 0; v < 16; ++v) {
    EXPECT_EQ(H::binOf(v), v);
    EXPECT_EQ(H::binLower(static_cast<std::uint32_t>(v)), v);
    EXPECT_EQ(H::binUpper(static_cast<std::uint32_t>(v)), v);
  }
}

TEST(Histogram, EachPowerOfTwoRangeHasEightEqualSubBins) {
  EXPECT_EQ(H::binOf(16), 16u);
  EXPECT_EQ(H::binOf(17), 16u);
  EXPECT_EQ(H::binOf(18), 17u);
  EXPECT_EQ(H::binOf(31), 23u);
  EXPECT_EQ(H::binOf(32), 24u);
  EXPECT_EQ(H::binLower(24), 32u);
  EXPECT_EQ(H::binUpper(24), 35u);
  EXPECT_EQ(H::binOf(1000), H::binOf(1023));  // [512, 1024) in widths of 64: 960..1023
  EXPECT_EQ(H::binLower(H::binOf(1000)), 960u);
  EXPECT_EQ(H::binOf(UINT64_MAX), H::kBinCount - 1);
  EXPECT_EQ(H::binUpper(H::kBinCount - 1), UINT64_MAX);
  EXPECT_THROW(H::binLower(H::kBinCount), std::out_of_range);
}

TEST(Histogram, BinsTileTheWholeRange) {
  for (std::uint32_t b = 0; b < H::kBinCount; ++b) {
    ASSERT_EQ(H::binOf(H::binLower(b)), b);
    ASSERT_EQ(H::binOf(H::binUpper(b)), b);
    if (b + 1 < H::kBinCount) {
      ASSERT_EQ(H::binLower(b + 1), H::binUpper(b) + 1);
    }
    if (b >= 16) {  // width at most 1/8 of the lower bound
      ASSERT_LE((H::binUpper(b) - H::binLower(b) + 1) * 8, H::binLower(b));
    }
  }
}

TEST(Histogram, PercentilesOfOneToHundred) {
  H h;
  for (std::uint64_t v = 1; v <= 100; ++v) h.add(v);
  EXPECT_EQ(h.total(), 100u);
  EXPECT_EQ(h.percentile(5), 5);      // rank 5, exact bin
  EXPECT_EQ(h.percentile(50), 49.5);  // rank 50, bin [48, 51]
  EXPECT_EQ(h.percentile(95), 91.5);  // rank 95, bin [88, 95]
  EXPECT_EQ(h.percentile(0), 1);
  EXPECT_EQ(h.percentile(100), 99.5);  // bin [96, 103]
  EXPECT_THROW(h.percentile(101), std::invalid_argument);
  EXPECT_THROW(h.percentile(-1), std::invalid_argument);
  EXPECT_THROW(h.percentile(std::nan("")), std::invalid_argument);
}

TEST(Histogram, AllPopulationAddsAbsentZeros) {
  H h;
  h.add(100, 10);
  EXPECT_EQ(h.percentile(50), 99.5);      // present: all ten in [96, 103]
  EXPECT_EQ(h.percentile(50, 40), 0);     // all: 30 zeros first, rank 20
  EXPECT_EQ(h.percentile(75, 40), 0);     // rank 30: still a zero
  EXPECT_EQ(h.percentile(76, 40), 99.5);  // rank 31
  EXPECT_EQ(h.percentile(95, 40), 99.5);  // rank 38
  EXPECT_THROW(h.percentile(50, 5), std::invalid_argument);
  EXPECT_TRUE(std::isnan(H().percentile(50)));
  EXPECT_EQ(H().percentile(50, 7), 0);
}

TEST(Histogram, MergeIsElementWiseAndOrderFree) {
  std::mt19937_64 rng(11);
  H whole, a, b, c;
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    whole.add(v);
    (i % 3 == 0 ? a : i % 3 == 1 ? b : c).add(v);
  }
  H abc = a;
  abc.merge(b);
  abc.merge(c);
  H cba = c;
  H ba = b;
  ba.merge(a);
  cba.merge(ba);
  EXPECT_EQ(abc, whole);
  EXPECT_EQ(cba, whole);
  for (std::size_t i = 1; i < whole.bins().size(); ++i) EXPECT_LT(whole.bins()[i - 1].first, whole.bins()[i].first);
}

// A process keeps the merged histogram of every node it owns until it is written: merging two
// histograms of overlapping bins holds the union, and no more (csp-prof-mpi's peak memory grew
// with the profile count by the unused half of the sum of both).
TEST(Histogram, MergeHoldsTheUnionOfTheBinsAndNoMore) {
  H a, b;
  for (std::uint64_t v = 1000; v < 2000; v += 7) a.add(v);
  for (std::uint64_t v = 1500; v < 2600; v += 5) b.add(v);
  const std::size_t sum = a.bins().size() + b.bins().size();
  a.merge(b);
  EXPECT_LT(a.bins().size(), sum);
  EXPECT_EQ(a.bins().capacity(), a.bins().size());
  H empty;
  empty.merge(a);
  EXPECT_EQ(empty, a);
  EXPECT_EQ(empty.bins().capacity(), empty.bins().size());
}

TEST(Histogram, PercentileWithinOneSixteenthOfTheTrueValue) {
  std::mt19937_64 rng(5);
  std::vector<std::uint64_t> values;
  H h;
  for (int i = 0; i < 999; ++i) {
    const std::uint64_t v = 16 + (rng() >> (rng() % 50));
    values.push_back(v);
    h.add(v);
  }
  std::sort(values.begin(), values.end());
  for (double p : {5.0, 50.0, 95.0}) {
    const auto rank = static_cast<std::size_t>(std::ceil(p / 100 * 999));
    const double truth = static_cast<double>(values[rank - 1]);
    EXPECT_LE(std::fabs(h.percentile(p) - truth), truth / 16) << p;
  }
}

// The summaries fill histograms through HistogramBuilder (a dense range of bins); the result must
// be exactly the histogram that adding the values one by one gives, whichever way the range
// widens (first value in the middle, then values below and above it, zeros, the largest value).
TEST(Histogram, BuilderGivesTheSameHistogramAsAddingOneByOne) {
  std::mt19937_64 rng(28);
  for (int round = 0; round < 50; ++round) {
    H direct;
    HistogramBuilder builder;
    EXPECT_TRUE(builder.empty());
    const int n = 1 + static_cast<int>(rng() % 400);
    for (int i = 0; i < n; ++i) {
      std::uint64_t v = rng() >> (rng() % 64);
      if (i % 37 == 5) v = 0;
      if (i % 101 == 7) v = UINT64_MAX;
      direct.add(v);
      builder.add(v);
    }
    EXPECT_FALSE(builder.empty());
    EXPECT_EQ(builder.histogram(), direct);
    EXPECT_EQ(builder.histogram().total(), static_cast<std::uint64_t>(n));
  }
  EXPECT_EQ(HistogramBuilder().histogram(), H());
}

// csp-prof-mpi adds a block of a node's values at a time (addDivided): the same histogram as
// adding each value divided by the period, whichever way the range widens inside a block and
// between blocks, for periods of 1 (no division), 3 and 10^6.
TEST(Histogram, BuilderTakesBlocksOfValuesDividedByThePeriod) {
  std::mt19937_64 rng(2811);
  for (const std::uint64_t period : {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{1000000}}) {
    const PeriodDivisor divisor(period);
    for (int round = 0; round < 30; ++round) {
      HistogramBuilder one, blocks;
      std::vector<std::uint64_t> values(1 + rng() % 300);
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = rng() >> (rng() % 64);
        if (i % 41 == 3) values[i] = UINT64_MAX;
        if (i % 29 == 4) values[i] = period;  // one sample
        one.add(divisor.divide(values[i]));
      }
      for (std::size_t at = 0; at < values.size();) {  // blocks of 1 to 64 values
        const std::size_t n = std::min<std::size_t>(values.size() - at, 1 + rng() % 64);
        blocks.addDivided(std::span(values).subspan(at, n), divisor);
        at += n;
      }
      EXPECT_EQ(blocks.histogram(), one.histogram()) << "period " << period << ", round " << round;
    }
  }
}

// The summaries divide every value by its metric's period through PeriodDivisor: the quotient
// must be the exact floor for any value and period, at the edges of the double's range too.
TEST(PeriodDivisor, IsTheExactFloorOfTheQuotient) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::uint64_t periods[] = {
      1, 2, 3, 7, 1000, 5'000'000, 999'999'937, std::uint64_t{1} << 40, (std::uint64_t{1} << 52) + 1, UINT64_MAX};
  for (const std::uint64_t d : periods) {
    const PeriodDivisor divisor(d);
    for (int i = 0; i < 20000; ++i) {
      const std::uint64_t r = next();
      const std::uint64_t v = i % 4 == 0 ? r : i % 4 == 1 ? r >> 11 : i % 4 == 2 ? (r >> 40) * d : (r >> 40) * d - 1;
      ASSERT_EQ(divisor.divide(v), v / d) << v << " / " << d;
    }
    for (const std::uint64_t v :
         {std::uint64_t{0}, d - 1, d, d + 1, (std::uint64_t{1} << 52) - 1, std::uint64_t{1} << 52,
          (std::uint64_t{1} << 63) - 1, std::uint64_t{1} << 63, UINT64_MAX})
      ASSERT_EQ(divisor.divide(v), v / d) << v << " / " << d;
  }
  // Divisors of every width, and just beside powers of two, where the reciprocal's rounding is
  // tightest; values near multiples of them and near the top of the multiplied range.
  for (int i = 0; i < 4000; ++i) {
    const int bits = 1 + i % 64;
    std::uint64_t d = next() >> (64 - bits);
    if (i % 3 == 0) d = (std::uint64_t{1} << (bits - 1)) + (i % 2 == 0 ? 1 : 0) - (bits > 1 && i % 2 ? 1 : 0);
    if (d == 0) d = 1;
    const PeriodDivisor divisor(d);
    for (int j = 0; j < 50; ++j) {
      const std::uint64_t r = next() >> 1;
      const std::uint64_t q = r / d;
      for (const std::uint64_t v : {r, q * d, q * d - 1, q * d + d - 1, (std::uint64_t{1} << 63) - 1 - j})
        ASSERT_EQ(divisor.divide(v), v / d) << v << " / " << d;
    }
  }
}
