// Summary accumulators: hand-computed statistics for both populations, combined (Flat/Callers)
// nodes, extreme values, and bit-identical combine over random partitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/encoding.hpp"

using namespace csp;
using namespace csp::metrics;

namespace {

IntAccumulator accumulateAll(const std::vector<std::pair<std::uint32_t, std::uint64_t>>& values) {
  IntAccumulator a;
  for (const auto& [profile, value] : values) a.accumulate(profile, value);
  return a;
}

// The textbook data set {2, 4, 4, 4, 5, 5, 7, 9}: mean 5, population standard deviation 2.
const std::vector<std::pair<std::uint32_t, std::uint64_t>> kTextbook = {{0, 2}, {1, 4}, {2, 4}, {3, 4},
                                                                        {4, 5}, {5, 5}, {6, 7}, {7, 9}};

}  // namespace

TEST(IntAccumulator, PresentPopulationIsExact) {
  const Statistics s = accumulateAll(kTextbook).finalize(8, Population::Present);
  EXPECT_EQ(s.inputs, 8u);
  EXPECT_EQ(s.count, 8u);
  EXPECT_EQ(s.sum, 40);
  EXPECT_EQ(s.mean, 5);
  EXPECT_EQ(s.stddev, 2);
  EXPECT_EQ(s.cfvar, 0.4);
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.argmin, 0u);
  EXPECT_EQ(s.max, 9);
  EXPECT_EQ(s.argmax, 7u);
  EXPECT_EQ(s.imbalance, 1.8);
}

TEST(IntAccumulator, AllPopulationCountsAbsentProfilesAsZero) {
  // Two more profiles (8, 9) without the node: sum of squares 232 over 10 values.
  const Statistics s = accumulateAll(kTextbook).finalize(10, Population::All);
  EXPECT_EQ(s.inputs, 10u);
  EXPECT_EQ(s.count, 8u);
  EXPECT_EQ(s.sum, 40);
  EXPECT_EQ(s.mean, 4);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(7.2));  // 232/10 - 4^2
  EXPECT_DOUBLE_EQ(s.cfvar, std::sqrt(7.2) / 4);
  EXPECT_EQ(s.min, 0);
  EXPECT_EQ(s.argmin, kNoIndex);  // an absent profile, not recorded
  EXPECT_EQ(s.max, 9);
  EXPECT_EQ(s.argmax, 7u);
  EXPECT_EQ(s.imbalance, 2.25);
}

TEST(IntAccumulator, AllPopulationWithEveryProfilePresentEqualsPresent) {
  const IntAccumulator a = accumulateAll(kTextbook);
  const Statistics all = a.finalize(8, Population::All);
  const Statistics present = a.finalize(8, Population::Present);
  EXPECT_EQ(all.mean, present.mean);
  EXPECT_EQ(all.stddev, present.stddev);
  EXPECT_EQ(all.min, 2);
  EXPECT_EQ(all.argmin, 0u);
}

TEST(IntAccumulator, NodePresentInOneOfManyProfiles) {
  IntAccumulator a;
  a.accumulate(2, 12);
  const Statistics present = a.finalize(4, Population::Present);
  EXPECT_EQ(present.count, 1u);
  EXPECT_EQ(present.mean, 12);
  EXPECT_EQ(present.stddev, 0);
  EXPECT_EQ(present.cfvar, 0);
  EXPECT_EQ(present.imbalance, 1);
  const Statistics all = a.finalize(4, Population::All);
  EXPECT_EQ(all.mean, 3);                         // value / N
  EXPECT_DOUBLE_EQ(all.stddev, std::sqrt(27.0));  // 144/4 - 9
  EXPECT_EQ(all.min, 0);
  EXPECT_EQ(all.max, 12);
  EXPECT_EQ(all.argmax, 2u);
  EXPECT_EQ(all.imbalance, 4);
}

TEST(IntAccumulator, AscendingFeedEqualsTheGeneralOne) {
  // Ties with both extremes, a value of 2^64 - 1 first (the empty minimum's own value), zeros,
  // and squares that carry into the high word: the same accumulator either way.
  const std::vector<std::vector<std::uint64_t>> feeds = {
      {5, 3, 0, 3, 9, 9, 1, 1, 9},
      {UINT64_MAX, 7, UINT64_MAX, 0, 7},
      {0, UINT64_MAX, UINT64_MAX},
      {0, 0, 4},
      {UINT64_MAX / 3, UINT64_MAX / 3, 2, UINT64_MAX / 3},
  };
  for (const auto& feed : feeds) {
    IntAccumulator general, ascending;
    std::vector<std::uint32_t> profiles;
    for (std::uint32_t i = 0; i < feed.size(); ++i) {
      general.accumulate(10 + 3 * i, feed[i]);
      ascending.accumulateAscending(10 + 3 * i, feed[i]);
      profiles.push_back(10 + 3 * i);
    }
    EXPECT_EQ(ascending, general) << "feed of " << feed.size() << " values, first " << feed[0];
    EXPECT_EQ(ascending.argmin(), general.argmin());
    EXPECT_EQ(ascending.argmax(), general.argmax());
    // As blocks (csp-prof-mpi's summaries): the whole feed at once, and split after each value.
    IntAccumulator whole;
    whole.accumulateAscending(std::span(profiles), std::span(feed));
    EXPECT_EQ(whole, general);
    EXPECT_EQ(whole.argmin(), general.argmin());
    EXPECT_EQ(whole.argmax(), general.argmax());
    for (std::size_t cut = 0; cut <= feed.size(); ++cut) {
      IntAccumulator two;
      two.accumulateAscending(std::span(profiles).first(cut), std::span(feed).first(cut));
      two.accumulateAscending(std::span(profiles).subspan(cut), std::span(feed).subspan(cut));
      EXPECT_EQ(two, general) << "cut after " << cut;
      EXPECT_EQ(two.argmin(), general.argmin());
      EXPECT_EQ(two.argmax(), general.argmax());
    }
  }
}

TEST(IntAccumulator, ZeroIsAbsence) {
  IntAccumulator a;
  a.accumulate(0, 0);
  EXPECT_EQ(a, IntAccumulator());
}

TEST(IntAccumulator, EmptyPopulationIsUndefinedNotZero) {
  const IntAccumulator a;
  const Statistics present = a.finalize(5, Population::Present);
  EXPECT_EQ(present.inputs, 0u);
  EXPECT_TRUE(std::isnan(present.mean));
  EXPECT_TRUE(std::isnan(present.stddev));
  EXPECT_EQ(present.argmax, kNoIndex);
  const Statistics all = a.finalize(5, Population::All);
  EXPECT_EQ(all.mean, 0);
  EXPECT_EQ(all.max, 0);
  EXPECT_EQ(all.stddev, 0);
  EXPECT_TRUE(std::isnan(all.cfvar));      // 0 / 0
  EXPECT_TRUE(std::isnan(all.imbalance));  // 0 / 0
}

TEST(IntAccumulator, RejectsInconsistentProfileCount) {
  const IntAccumulator a = accumulateAll(kTextbook);
  EXPECT_THROW(a.finalize(7, Population::All), std::invalid_argument);
  EXPECT_NO_THROW(a.finalize(7, Population::Present));  // N plays no part
  IntAccumulator b;
  EXPECT_THROW(b.accumulate(kNoIndex, 1), std::invalid_argument);
}

TEST(IntAccumulator, TiesGoToTheSmallestProfileWhateverTheOrder) {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> v = {{5, 7}, {3, 7}, {9, 7}, {4, 1}, {8, 1}};
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::shuffle(v.begin(), v.end(), rng);
    IntAccumulator left, right;
    for (std::size_t i = 0; i < v.size(); ++i) (i % 2 ? left : right).accumulate(v[i].first, v[i].second);
    left.combine(right);
    EXPECT_EQ(left.argmax(), 3u);
    EXPECT_EQ(left.argmin(), 4u);
  }
}

TEST(IntAccumulator, HugeValuesStayExact) {
  constexpr std::uint64_t kMax = UINT64_MAX;
  IntAccumulator a;
  for (std::uint32_t p = 0; p < 3; ++p) a.accumulate(p, kMax);
  EXPECT_EQ(a.sum(), static_cast<Uint128>(kMax) * 3);
  // 3 (2^64-1)^2 = 2 * 2^128 + (2^128 - 3 * 2^65 + 3): the sum of squares carries into the high word.
  EXPECT_EQ(a.sumSquaresHigh(), 2u);
  EXPECT_EQ(a.sumSquaresLow(), (~Uint128{0}) - 3 * (Uint128{1} << 65) + 4);
  const Statistics s = a.finalize(3, Population::Present);
  EXPECT_EQ(s.stddev, 0);  // exact cancellation, no rounding residue
  EXPECT_EQ(s.cfvar, 0);
  EXPECT_EQ(s.imbalance, 1);

  // {2^64-1, 1}: stddev (2^64-2)/2 = 2^63 - 1 exactly before the final rounding.
  IntAccumulator b;
  b.accumulate(0, kMax);
  b.accumulate(1, 1);
  const Statistics t = b.finalize(2, Population::Present);
  EXPECT_EQ(t.mean, 9223372036854775808.0);
  EXPECT_EQ(t.stddev, 9223372036854775807.0);
  EXPECT_EQ(t.argmax, 0u);
  EXPECT_EQ(t.argmin, 1u);
}

TEST(IntAccumulator, ExactSumsPrintInDecimal) {
  EXPECT_EQ(toDecimalString(0), "0");
  EXPECT_EQ(toDecimalString(1234567890), "1234567890");
  EXPECT_EQ(toDecimalString(static_cast<Uint128>(UINT64_MAX) * 3), "55340232221128654845");
  EXPECT_EQ(toDecimalString(~Uint128{0}), "340282366920938463463374607431768211455");
}

TEST(IntAccumulator, ManyHugeValuesDoNotOverflow) {
  // 2^20 values near 2^64: the sum of squares needs ~148 bits.
  const std::uint64_t v = UINT64_MAX - 12345;
  IntAccumulator one;
  one.accumulate(0, v);
  // Doubling by combine reaches 2^20 values in 20 steps.
  for (int i = 0; i < 20; ++i) {
    IntAccumulator copy = one;
    one.combine(copy);
  }
  EXPECT_EQ(one.count(), 1u << 20);
  EXPECT_EQ(one.sum(), static_cast<Uint128>(v) << 20);
  const Statistics s = one.finalize(1u << 20, Population::All);
  EXPECT_EQ(s.stddev, 0);
  EXPECT_EQ(s.mean, static_cast<double>(v));
}

TEST(IntAccumulator, CombineIsBitIdenticalOverRandomPartitions) {
  std::mt19937_64 rng(20261121);
  for (int trial = 0; trial < 50; ++trial) {
    const std::uint32_t profiles = 1 + static_cast<std::uint32_t>(rng() % 300);
    std::vector<std::pair<std::uint32_t, std::uint64_t>> values;
    for (std::uint32_t p = 0; p < profiles; ++p) {
      if (rng() % 4 == 0) continue;  // absent
      std::uint64_t v;
      switch (rng() % 4) {
        case 0:
          v = 1 + rng() % 10;
          break;  // many ties
        case 1:
          v = UINT64_MAX - rng() % 3;
          break;  // near the top
        default:
          v = 1 + (rng() >> (rng() % 64));
          break;  // all magnitudes
      }
      values.emplace_back(p, v);
    }
    const std::string reference = encode(accumulateAll(values));

    // Random partition into groups, each accumulated in random order, then combined along a
    // random tree.
    std::shuffle(values.begin(), values.end(), rng);
    const std::size_t groups = 1 + rng() % 8;
    std::vector<IntAccumulator> parts(groups);
    for (const auto& [p, v] : values) parts[rng() % groups].accumulate(p, v);
    while (parts.size() > 1) {
      const std::size_t i = rng() % parts.size();
      std::size_t j = rng() % (parts.size() - 1);
      if (j >= i) ++j;
      parts[i].combine(parts[j]);
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(j));
    }
    ASSERT_EQ(encode(parts[0]), reference) << "trial " << trial;
    const Statistics a = parts[0].finalize(profiles, Population::All);
    const Statistics b = decodeIntAccumulator(reference).finalize(profiles, Population::All);
    EXPECT_EQ(a.mean, b.mean);
    EXPECT_EQ(a.stddev, b.stddev);
    EXPECT_EQ(a.max, b.max);
    EXPECT_EQ(a.argmax, b.argmax);
  }
}

TEST(IntAccumulator, CombinedNodeCountsInstances) {
  // Procedure f has two CCT instances A and B; N = 2 profiles.
  IntAccumulator a, b;
  a.accumulate(0, 10);
  a.accumulate(1, 20);
  b.accumulate(0, 30);
  IntAccumulator flat = IntAccumulator::forCombinedNode();
  flat.combineInstance(a);
  flat.combineInstance(b);
  EXPECT_EQ(flat.instances(), 2u);

  // "all": the 4 (instance, profile) pairs {10, 20, 30, 0}.
  const Statistics all = flat.finalize(2, Population::All);
  EXPECT_EQ(all.inputs, 4u);
  EXPECT_EQ(all.count, 3u);
  EXPECT_EQ(all.sum, 60);
  EXPECT_EQ(all.mean, 15);
  EXPECT_DOUBLE_EQ(all.stddev, std::sqrt(125.0));
  EXPECT_EQ(all.min, 0);
  EXPECT_EQ(all.max, 30);
  EXPECT_EQ(all.argmax, 0u);
  // "present": {10, 20, 30}.
  const Statistics present = flat.finalize(2, Population::Present);
  EXPECT_EQ(present.inputs, 3u);
  EXPECT_EQ(present.mean, 20);
  EXPECT_EQ(present.min, 10);
  EXPECT_EQ(present.argmin, 0u);

  // Combining instances in another order gives the same state.
  IntAccumulator other = IntAccumulator::forCombinedNode();
  other.combineInstance(b);
  other.combineInstance(a);
  EXPECT_EQ(other, flat);
}

TEST(IntAccumulator, CombineRefusesDifferentInstanceCounts) {
  IntAccumulator flat = IntAccumulator::forCombinedNode();
  flat.combineInstance(IntAccumulator());
  flat.combineInstance(IntAccumulator());
  IntAccumulator single;
  EXPECT_THROW(single.combine(flat), std::invalid_argument);
  // Partials of the same combined node over different profiles do combine.
  IntAccumulator flat2 = IntAccumulator::forCombinedNode();
  flat2.combineInstance(IntAccumulator());
  flat2.combineInstance(IntAccumulator());
  EXPECT_NO_THROW(flat.combine(flat2));
  EXPECT_EQ(flat.instances(), 2u);
}

// ---------------------------------------------------------------------------------------------

TEST(RealAccumulator, MatchesTheTextbookValues) {
  RealAccumulator a;
  for (const auto& [p, v] : kTextbook) a.accumulate(p, static_cast<double>(v));
  const Statistics present = a.finalize(8, Population::Present);
  EXPECT_DOUBLE_EQ(present.mean, 5);
  EXPECT_DOUBLE_EQ(present.stddev, 2);
  EXPECT_DOUBLE_EQ(present.sum, 40);
  EXPECT_EQ(present.argmax, 7u);
  const Statistics all = a.finalize(10, Population::All);
  EXPECT_DOUBLE_EQ(all.mean, 4);
  EXPECT_DOUBLE_EQ(all.stddev, std::sqrt(7.2));
  EXPECT_EQ(all.min, 0);
  EXPECT_EQ(all.argmin, kNoIndex);
}

TEST(RealAccumulator, NegativeValuesAndAbsentZeros) {
  RealAccumulator a;
  a.accumulate(4, -3);
  a.accumulate(1, 1);
  const Statistics all = a.finalize(3, Population::All);  // {-3, 1, 0}
  EXPECT_EQ(all.min, -3);
  EXPECT_EQ(all.argmin, 4u);
  EXPECT_EQ(all.max, 1);
  EXPECT_EQ(all.argmax, 1u);
  EXPECT_DOUBLE_EQ(all.mean, -2.0 / 3);

  RealAccumulator neg;
  neg.accumulate(0, -2);
  const Statistics n = neg.finalize(2, Population::All);  // {-2, 0}
  EXPECT_EQ(n.max, 0);
  EXPECT_EQ(n.argmax, kNoIndex);
  EXPECT_DOUBLE_EQ(n.stddev, 1);
}

TEST(RealAccumulator, StableWhereRawSumsOfSquaresCancel) {
  // Large offset, tiny spread: sum-of-squares arithmetic would lose every digit.
  RealAccumulator a;
  const double base = 1e9;
  for (std::uint32_t p = 0; p < 1000; ++p) a.accumulate(p, base + (p % 2 ? 0.5 : -0.5));
  const Statistics s = a.finalize(1000, Population::Present);
  EXPECT_NEAR(s.stddev, 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(s.mean, base);
}

TEST(RealAccumulator, CombineIsCommutativeBitForBit) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> dist(-1e6, 1e6);
  for (int trial = 0; trial < 200; ++trial) {
    RealAccumulator x, y;
    for (std::uint32_t p = 0; p < 1 + rng() % 20; ++p) x.accumulate(p, dist(rng));
    for (std::uint32_t p = 100; p < 100 + rng() % 20; ++p) y.accumulate(p, dist(rng));
    RealAccumulator xy = x, yx = y;
    xy.combine(y);
    yx.combine(x);
    ASSERT_EQ(encode(xy), encode(yx));
  }
}

TEST(RealAccumulator, FixedOrderIsReproducibleAndCloseToAnyOrder) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> dist(0, 100);
  std::vector<double> v(500);
  for (auto& x : v) x = dist(rng);
  RealAccumulator ordered;
  for (std::uint32_t p = 0; p < v.size(); ++p) ordered.accumulate(p, v[p]);
  RealAccumulator again;
  for (std::uint32_t p = 0; p < v.size(); ++p) again.accumulate(p, v[p]);
  EXPECT_EQ(encode(ordered), encode(again));

  RealAccumulator left, right;
  for (std::uint32_t p = 0; p < v.size(); ++p) (p % 3 ? left : right).accumulate(p, v[p]);
  left.combine(right);
  const Statistics a = ordered.finalize(500, Population::Present);
  const Statistics b = left.finalize(500, Population::Present);
  EXPECT_NEAR(a.mean, b.mean, 1e-12 * a.mean);
  EXPECT_NEAR(a.stddev, b.stddev, 1e-10 * a.stddev);
  EXPECT_EQ(a.max, b.max);
  EXPECT_EQ(a.argmax, b.argmax);
}

TEST(RealAccumulator, RejectsNonFiniteValues) {
  RealAccumulator a;
  EXPECT_THROW(a.accumulate(0, std::nan("")), std::invalid_argument);
  EXPECT_THROW(a.accumulate(0, HUGE_VAL), std::invalid_argument);
  a.accumulate(0, 1e300);
  const RealAccumulator before = a;
  EXPECT_THROW(a.accumulate(1, -1e300), std::overflow_error);  // M2 would overflow
  EXPECT_EQ(a, before);
}

TEST(RealAccumulator, CombinedNodeCountsInstances) {
  RealAccumulator a, b;
  a.accumulate(0, 10);
  a.accumulate(1, 20);
  b.accumulate(0, 30);
  RealAccumulator flat = RealAccumulator::forCombinedNode();
  flat.combineInstance(a);
  flat.combineInstance(b);
  const Statistics all = flat.finalize(2, Population::All);
  EXPECT_EQ(all.inputs, 4u);
  EXPECT_DOUBLE_EQ(all.mean, 15);
  EXPECT_DOUBLE_EQ(all.stddev, std::sqrt(125.0));
}
