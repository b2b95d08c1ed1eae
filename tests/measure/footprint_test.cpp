// The all-window footprint of csp-mem (measure/valgrind/footprint.c) against a brute-force count
// over every window of small traces: exact at precision 100 %, and within the guarantee
// c x footprint <= measured <= footprint at lower precisions (seed: Ding and Chilimbi, section 3).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "csp/metrics/histogram.hpp"
#include "measure/valgrind/footprint.h"

namespace {

using Histogram2d = std::map<std::pair<unsigned, unsigned>, fp_u64>;  // (length bin, size bin) -> windows

struct Host {
  std::map<fp_u64, fp_u64> last;
  static void* alloc(void*, fp_u64 bytes) { return std::calloc(1, bytes); }
  static void release(void*, void* p) { std::free(p); }
  static fp_u64* lastAccess(void* ctx, fp_u64 block) { return &static_cast<Host*>(ctx)->last[block]; }
};

// `readEvery` > 0 also reads the histogram every so many accesses (the results must not change).
Histogram2d measured(const std::vector<fp_u64>& trace, unsigned precision, std::size_t readEvery = 0) {
  Host host;
  Footprint fp;
  fp_init(&fp, FpHost{Host::alloc, Host::release, Host::lastAccess, &host}, precision);
  std::vector<fp_u64> row(FP_LENGTH_BINS);
  for (std::size_t i = 0; i < trace.size(); ++i) {
    fp_access(&fp, trace[i]);
    if (readEvery && i % readEvery == 0) fp_row(&fp, 1, row.data());
  }
  Histogram2d out;
  for (unsigned f = 0; f < FP_SIZE_BINS; ++f) {
    if (!fp_row(&fp, f, row.data())) continue;
    for (unsigned l = 0; l < FP_LENGTH_BINS; ++l)
      if (row[l]) out[{l, f}] = row[l];
  }
  fp_free(&fp);
  return out;
}

// footprints[length] = the footprint of every window of that length.
std::map<fp_u64, std::vector<fp_u64>> bruteForce(const std::vector<fp_u64>& trace) {
  std::map<fp_u64, std::vector<fp_u64>> byLength;
  for (std::size_t s = 0; s < trace.size(); ++s) {
    std::set<fp_u64> seen;
    for (std::size_t e = s; e < trace.size(); ++e) {
      seen.insert(trace[e]);
      byLength[e - s + 1].push_back(seen.size());
    }
  }
  return byLength;
}

// A working set that drifts, so that footprints of long windows differ from short ones; with
// `runs`, each access is repeated 1 to 20 times (scans through a block).
std::vector<fp_u64> randomTrace(std::size_t n, fp_u64 blocks, unsigned seed, bool runs = false) {
  std::mt19937_64 rng(seed);
  std::vector<fp_u64> t;
  while (t.size() < n) {
    const fp_u64 b = rng() % blocks + t.size() / 16;
    for (std::size_t r = runs ? 1 + rng() % 20 : 1; r > 0 && t.size() < n; --r) t.push_back(b);
  }
  return t;
}

TEST(Footprint, BinsMatchTheMetricsHistogram) {
  for (fp_u64 v : {0ull, 1ull, 7ull, 8ull, 15ull, 16ull, 17ull, 1000ull, 123456789ull, ~0ull}) {
    EXPECT_EQ(fp_bin(v), csp::metrics::LogLinearHistogram::binOf(v)) << v;
    EXPECT_EQ(fp_bin_lower(fp_bin(v)), csp::metrics::LogLinearHistogram::binLower(fp_bin(v))) << v;
    EXPECT_EQ(fp_bin_upper(fp_bin(v)), csp::metrics::LogLinearHistogram::binUpper(fp_bin(v))) << v;
  }
}

TEST(Footprint, ExactAtFullPrecision) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const auto trace = randomTrace(700, 40, seed, seed > 2);
    Histogram2d expected;
    for (const auto& [length, sizes] : bruteForce(trace))
      for (const auto size : sizes) expected[{fp_bin(length), fp_bin(size)}]++;
    EXPECT_EQ(measured(trace, 100), expected) << "seed " << seed;
    EXPECT_EQ(measured(trace, 100, 37), expected) << "seed " << seed << ", read while measuring";
  }
}

void checkWithinPrecision(const std::vector<fp_u64>& trace, const std::map<fp_u64, std::vector<fp_u64>>& truth);

// Per length bin, the k-th smallest measured footprint lies in [c x, x] of the k-th smallest true
// one x (pairwise bounds survive sorting); checked through the bins at the percentiles the
// footprint curves show, and the window counts per length bin are exact.
TEST(Footprint, WithinPrecisionAtEveryPercentile) {
  for (bool runs : {false, true}) {
    const auto trace = randomTrace(900, 60, 7, runs);
    const auto truth = bruteForce(trace);
    checkWithinPrecision(trace, truth);
  }
}

void checkWithinPrecision(const std::vector<fp_u64>& trace, const std::map<fp_u64, std::vector<fp_u64>>& truth) {
  for (unsigned precision : {50u, 75u, 90u}) {
    const auto got = measured(trace, precision);
    std::map<unsigned, std::vector<fp_u64>> trueByBin;
    for (const auto& [length, sizes] : truth)
      trueByBin[fp_bin(length)].insert(trueByBin[fp_bin(length)].end(), sizes.begin(), sizes.end());
    for (auto& [lbin, sizes] : trueByBin) {
      std::sort(sizes.begin(), sizes.end());
      csp::metrics::LogLinearHistogram h;
      for (const auto& [key, count] : got)
        if (key.first == lbin) h.add(csp::metrics::LogLinearHistogram::binLower(key.second), count);
      ASSERT_EQ(h.total(), sizes.size()) << "length bin " << lbin;
      for (double p : {0.0, 5.0, 50.0, 95.0, 100.0}) {
        const auto rank = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(p / 100 * sizes.size())));
        const fp_u64 exact = sizes[rank - 1];
        const unsigned bin = h.percentileBin(p, h.total());
        EXPECT_LE(fp_bin_lower(bin), exact) << "c " << precision << " length bin " << lbin << " p" << p;
        EXPECT_GE(static_cast<double>(fp_bin_upper(bin)), precision / 100.0 * static_cast<double>(exact) - 1e-9)
            << "c " << precision << " length bin " << lbin << " p" << p;
      }
    }
  }
}

// Fewer ranges than accesses: the point of the approximation.
TEST(Footprint, RangesStayLogarithmic) {
  Host host;
  Footprint fp;
  fp_init(&fp, FpHost{Host::alloc, Host::release, Host::lastAccess, &host}, 90);
  const auto trace = randomTrace(200000, 3000, 3);
  unsigned most = 0;
  for (const auto b : trace) {
    fp_access(&fp, b);
    most = std::max(most, fp.rangeCount);
  }
  EXPECT_LT(most, 1000u);
  EXPECT_EQ(fp.now, trace.size());
  fp_free(&fp);
}

}  // namespace

namespace {

// Two threads' merged trace: true = an access by the second thread. With `turns`, the threads
// alternate in turns of 1 to 30 accesses (a known schedule); else each access is random.
std::vector<bool> twoThreads(std::size_t n, unsigned seed, bool turns) {
  std::mt19937_64 rng(seed);
  std::vector<bool> t;
  bool who = false;
  while (t.size() < n) {
    for (std::size_t r = turns ? 1 + rng() % 30 : 1; r > 0 && t.size() < n; --r)
      t.push_back(turns ? who : rng() % 3 == 0);
    who = !who;
  }
  return t;
}

Histogram2d interleaving(const std::vector<bool>& trace, unsigned precision) {
  Host host;
  Interleave il;
  il_init(&il, FpHost{Host::alloc, Host::release, Host::lastAccess, &host}, precision);
  for (const bool second : trace) il_access(&il, second ? 1 : 0);
  Histogram2d out;
  std::vector<fp_u64> row(FP_LENGTH_BINS);
  for (unsigned d = 0; d < FP_SIZE_BINS; ++d) {
    if (!il_row(&il, d, row.data())) continue;
    for (unsigned l = 0; l < FP_LENGTH_BINS; ++l)
      if (row[l]) out[{l, d}] = row[l];
  }
  il_free(&il);
  return out;
}

// degrees[length] = min(first, second) of every window of that length.
std::map<fp_u64, std::vector<fp_u64>> interleavingBruteForce(const std::vector<bool>& trace) {
  std::map<fp_u64, std::vector<fp_u64>> byLength;
  for (std::size_t s = 0; s < trace.size(); ++s) {
    fp_u64 counts[2] = {0, 0};
    for (std::size_t e = s; e < trace.size(); ++e) {
      counts[trace[e] ? 1 : 0]++;
      byLength[e - s + 1].push_back(std::min(counts[0], counts[1]));
    }
  }
  return byLength;
}

TEST(Interleaving, ExactAtFullPrecision) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const auto trace = twoThreads(600, seed, seed % 2 == 0);
    Histogram2d expected;
    for (const auto& [length, degrees] : interleavingBruteForce(trace))
      for (const auto d : degrees) expected[{fp_bin(length), fp_bin(d)}]++;
    EXPECT_EQ(interleaving(trace, 100), expected) << "seed " << seed;
  }
}

// A known schedule: strict alternation in turns of exactly k accesses. Every window of length L
// holds min(first, second) between (L - k) / 2 and L / 2, so all its percentiles lie there (up to
// the bins); a window no longer than k can be one thread alone (degree 0).
TEST(Interleaving, KnownScheduleWithinPrecision) {
  const unsigned k = 8;
  std::vector<bool> trace;
  for (unsigned i = 0; i < 2000; ++i) trace.push_back((i / k) % 2 == 1);
  for (unsigned precision : {50u, 90u}) {
    std::map<unsigned, csp::metrics::LogLinearHistogram> byLength;
    for (const auto& [key, count] : interleaving(trace, precision))
      byLength[key.first].add(csp::metrics::LogLinearHistogram::binLower(key.second), count);
    for (const auto& [lbin, h] : byLength) {
      const double low = (static_cast<double>(fp_bin_lower(lbin)) - k) / 2, high = fp_bin_upper(lbin) / 2.0;
      const unsigned p0 = h.percentileBin(0, h.total()), p100 = h.percentileBin(100, h.total());
      EXPECT_LE(fp_bin_lower(p100), high) << "c " << precision << " length bin " << lbin;
      EXPECT_GE(static_cast<double>(fp_bin_upper(p0)), precision / 100.0 * low - 1)
          << "c " << precision << " length bin " << lbin;
      if (fp_bin_upper(lbin) <= k) {
        EXPECT_EQ(p0, 0u) << "length bin " << lbin;
      }
    }
  }
}

}  // namespace
