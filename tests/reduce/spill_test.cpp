// The projection spill (reduce/src/pipeline/spill.cpp): what the structure pass keeps of every
// profile for the values pass, in an unlinked temporary file, written and read by many threads.
#include <gtest/gtest.h>
#include <tbb/parallel_for.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "stages.hpp"

using namespace csp;
using csp::reduce::StmtValue;
using csp::reduce::stages::ProjectionSpill;
using csp::reduce::stages::SpillRef;

namespace {

struct Record {
  std::vector<MetricDescriptor> metrics;
  std::vector<StmtValue> stmt;
};

// Node ids up and down (negative deltas), metric ids and values of every width, the edges too.
Record record(std::uint32_t seed) {
  std::mt19937_64 random(seed);
  Record r;
  for (std::uint32_t m = 0; m <= seed % 4; ++m) {
    MetricDescriptor d;
    d.name = "metric-" + std::to_string(seed) + "-" + std::to_string(m);
    // Periods: 1 (values as they are), a small one, one of a timer's nanoseconds and a power of
    // two: values are spilled in units of their period, with a remainder when not a multiple.
    static constexpr std::uint64_t kPeriods[] = {1, 3, 1'000'000, std::uint64_t{1} << 40};
    d.period = kPeriods[(seed + m) % 4];
    r.metrics.push_back(d);
  }
  const std::size_t n = seed % 7 == 0 ? 0 : random() % 3000;
  for (std::size_t i = 0; i < n; ++i) {
    const int bits = static_cast<int>(random() % 65);
    std::uint64_t value = bits == 0 ? 0 : random() >> (64 - bits);
    // Mostly whole multiples of the period, as statement values are (sample counts x period).
    // Mostly a metric of the record; sometimes any id (kept as it is, unscaled).
    const auto metric =
        static_cast<std::uint16_t>(random() % 8 == 0 ? random() % (UINT16_MAX + 1ull) : random() % r.metrics.size());
    if (metric < r.metrics.size() && random() % 4 != 0 && r.metrics[metric].period > 1)
      value = (value / r.metrics[metric].period) * r.metrics[metric].period;
    r.stmt.push_back(
        {static_cast<std::uint32_t>(i % 5 == 0 ? UINT32_MAX - random() % 3 : random() % 100'000), metric, value});
  }
  return r;
}

}  // namespace

TEST(ProjectionSpill, RecordsComeBackAsPutFromManyThreads) {
  constexpr std::uint32_t kRecords = 400;
  ProjectionSpill spill;
  std::vector<SpillRef> refs(kRecords);
  tbb::parallel_for(std::uint32_t{0}, kRecords, [&](std::uint32_t i) {
    const Record r = record(i);
    refs[i] = spill.put(r.metrics, r.stmt);
  });
  tbb::parallel_for(std::uint32_t{0}, kRecords, [&](std::uint32_t i) {
    const Record r = record(i);
    const auto back = spill.get(refs[i]);
    ASSERT_EQ(back.metrics.size(), r.metrics.size()) << i;
    for (std::size_t m = 0; m < r.metrics.size(); ++m) EXPECT_EQ(back.metrics[m], r.metrics[m].name) << i;
    ASSERT_EQ(back.stmt.size(), r.stmt.size()) << i;
    for (std::size_t k = 0; k < r.stmt.size(); ++k) {
      ASSERT_EQ(back.stmt[k].node, r.stmt[k].node) << i << " " << k;
      ASSERT_EQ(back.stmt[k].metric, r.stmt[k].metric) << i << " " << k;
      ASSERT_EQ(back.stmt[k].value, r.stmt[k].value) << i << " " << k;
    }
  });
}

// A record read with the wrong bounds (what a damaged file would give) is an error naming the
// spill, never a crash or values made up.
TEST(ProjectionSpill, ARecordReadWithWrongBoundsIsAnError) {
  ProjectionSpill spill;
  const Record r = record(5);
  ASSERT_GT(r.stmt.size(), 100u);
  const SpillRef ref = spill.put(r.metrics, r.stmt);
  spill.put(r.metrics, r.stmt);  // bytes after it, so that longer reads find some
  for (const SpillRef bad :
       {SpillRef{ref.offset, ref.size - 1, false}, SpillRef{ref.offset, ref.size / 2, false},
        SpillRef{ref.offset, ref.size + 1, false}, SpillRef{ref.offset + 1, ref.size - 1, false}}) {
    try {
      const auto back = spill.get(bad);
      ADD_FAILURE() << "read " << back.stmt.size() << " values with size " << bad.size << " at " << bad.offset;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("projection spill file"), std::string::npos) << e.what();
    }
  }
}
