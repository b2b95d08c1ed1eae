// Percentiles, thread classes and sampling-error bounds of the views (docs/views.md): the
// histogram-based percentiles of every node against a brute-force sort of the stored per-thread
// values, on 1,000 profiles reduced by one and by three processes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/metrics/histogram.hpp"
#include "csp/metrics/scaling.hpp"
#include "csp/views/render.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
namespace fs = std::filesystem;
using storage::MetricScope;
using views::Statistic;

namespace {

constexpr Statistic kPercentiles[] = {Statistic::P5, Statistic::P25, Statistic::P50, Statistic::P75, Statistic::P95};
constexpr double kP[] = {5, 25, 50, 75, 95};

// 1,000 synthetic profiles (250 ranks x 4 threads), reduced once with one process and once with
// three; shared by the tests of this file.
class Distributions : public ::testing::Test {
 protected:
  // 1,000 profiles reduced by one and by three processes, shared by the tests of a ctest run
  // (csp::test::sharedInput).
  static void SetUpTestSuite() {
    dir_ = csp::test::sharedInput("distributions", [](const fs::path& d) {
      const auto meas = d / "meas";
      auto r = run(tool("csp-gen") + " -q --ranks 250 --threads 4 --nodes 120 --imbalance 1.6 -o " + meas.string());
      EXPECT_EQ(r.status, 0) << r.output;
      if (r.status != 0) return false;
      for (int np : {1, 3}) {
        r = run("timeout -k 5 300 " + (np > 1 ? csp::test::mpirun(np) : std::string()) + tool("csp-prof-mpi") +
                " -q -j 1 " + meas.string() + " -o " + (d / ("np" + std::to_string(np))).string());
        EXPECT_EQ(r.status, 0) << r.output;
        if (r.status != 0) return false;
      }
      return true;
    });
  }
  static fs::path db(int np) { return dir_ / ("np" + std::to_string(np)); }
  static fs::path dir_;
};
fs::path Distributions::dir_;

// The nearest-rank percentile of `values` (ascending) padded with `zeros` leading zeros.
std::uint64_t nearestRank(const std::vector<std::uint64_t>& values, std::uint64_t zeros, double p) {
  const std::uint64_t n = values.size() + zeros;
  auto rank = static_cast<std::uint64_t>(std::ceil(static_cast<long double>(p) / 100.0L * n));
  rank = std::clamp<std::uint64_t>(rank, 1, n);
  return rank <= zeros ? 0 : values[rank - zeros - 1];
}

// Checks every node's percentiles of a view over `classes` (empty: all threads) against a sort
// of the stored per-thread values.
void checkAgainstBruteForce(const fs::path& dir, const std::string& threads) {
  auto db = storage::Database::open(dir);
  const auto& meta = db->metadata();
  const std::uint64_t period = meta.metrics[0].descriptor.period;
  ASSERT_GT(period, 1u);
  views::ViewRequest request;
  request.thresholdPercent = 0;
  request.threads = threads;
  for (auto scope : {MetricScope::Inclusive, MetricScope::Exclusive})
    for (auto s : kPercentiles) request.columns.push_back({meta.metrics[0].descriptor.name, s, scope});
  request.columns.push_back({meta.metrics[0].descriptor.name, Statistic::ImbalanceMedian, MetricScope::Inclusive});
  const auto selection = views::selectThreads(*db, threads);

  for (auto population : {metrics::Population::All, metrics::Population::Present}) {
    request.population = population;
    const auto tree = views::buildView(*db, request);
    ASSERT_EQ(tree.profiles, selection.profiles);
    ASSERT_EQ(tree.nodes.size(), meta.nodeCount) << "every node shown";
    std::size_t exactChecks = 0, binChecks = 0;
    for (const auto& node : tree.nodes) {
      ASSERT_TRUE(node.cctNode);
      for (std::size_t c = 0; c < request.columns.size(); ++c) {
        const auto& col = request.columns[c];
        if (col.statistic == Statistic::ImbalanceMedian) continue;
        std::vector<std::uint64_t> values;
        for (const auto& v : db->nodeValues(*node.cctNode, 0, col.scope))
          if (selection.all || selection.classes[static_cast<std::size_t>(meta.threadClasses[v.profile].threadClass)])
            values.push_back(v.value / period);
        std::sort(values.begin(), values.end());
        const std::uint64_t zeros = population == metrics::Population::All ? selection.profiles - values.size() : 0;
        const double reported = node.values[c];
        if (values.size() + zeros == 0) {
          EXPECT_TRUE(std::isnan(reported));
          continue;
        }
        const double p =
            kP[std::find(std::begin(kPercentiles), std::end(kPercentiles), col.statistic) - std::begin(kPercentiles)];
        const std::uint64_t exact = nearestRank(values, zeros, p);
        const auto bin = metrics::LogLinearHistogram::binOf(exact);
        const double lo = static_cast<double>(metrics::LogLinearHistogram::binLower(bin)) * static_cast<double>(period);
        const double hi = static_cast<double>(metrics::LogLinearHistogram::binUpper(bin)) * static_cast<double>(period);
        ASSERT_GE(reported, lo) << "node " << *node.cctNode << " " << col.title() << " exact " << exact * period;
        ASSERT_LE(reported, hi) << "node " << *node.cctNode << " " << col.title() << " exact " << exact * period;
        if (exact < 16) {
          ASSERT_EQ(reported, static_cast<double>(exact * period)) << "node " << *node.cctNode << " " << col.title();
          ++exactChecks;
        } else {
          // Within half a bin: 1/16 of the value.
          EXPECT_LE(std::fabs(reported - static_cast<double>(exact * period)),
                    static_cast<double>(exact * period) / 16 + 1);
          ++binChecks;
        }
      }
    }
    EXPECT_GT(exactChecks, 100u) << "counts below 16 are exact";
    EXPECT_GT(binChecks, 100u) << "larger counts within their bin";
  }
}

TEST_F(Distributions, PercentilesMatchABruteForceSortOfEveryNode) {
  auto handle = storage::Database::open(db(1));
  ASSERT_EQ(handle->metadata().profiles.size(), 1000u);
  checkAgainstBruteForce(db(1), "all");
}

TEST_F(Distributions, PercentilesPerThreadClassMatchABruteForceSort) {
  auto handle = storage::Database::open(db(1));
  const auto& classes = handle->metadata().threadClasses;
  ASSERT_EQ(classes.size(), 1000u);
  std::map<storage::ThreadClass, int> count;
  for (const auto& c : classes) ++count[c.threadClass];
  EXPECT_EQ(count[storage::ThreadClass::Main], 250) << "thread 0 of every rank";
  ASSERT_GT(count[storage::ThreadClass::Worker], 0);
  checkAgainstBruteForce(db(1), "worker");
  checkAgainstBruteForce(db(1), "main");
}

TEST_F(Distributions, SameForAnyProcessCount) {
  const auto one = csp::test::dumpDatabase(db(1));
  const auto three = csp::test::dumpDatabase(db(3));
  ASSERT_EQ(one.size(), three.size());
  std::size_t distributions = 0;
  for (std::size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i], three[i]) << one[i].first;
    distributions += one[i].first.starts_with("distributions:");
  }
  EXPECT_GT(distributions, 120u) << "histograms and class summaries are stored";
}

// The sampling error of sums and the noise mark of imbalance (thesis App. A): a value is exact
// to (period - 1) per present thread.
TEST_F(Distributions, SamplingErrorBounds) {
  auto handle = storage::Database::open(db(1));
  views::ViewRequest request;
  request.threads = "all";
  const auto& name = handle->metadata().metrics[0].descriptor.name;
  const double e = static_cast<double>(handle->metadata().metrics[0].descriptor.period - 1);
  request.columns = {{name, Statistic::Sum, MetricScope::Inclusive},
                     {name, Statistic::Mean, MetricScope::Inclusive},
                     {name, Statistic::Max, MetricScope::Inclusive},
                     {name, Statistic::Imbalance, MetricScope::Inclusive},
                     {name, Statistic::Count, MetricScope::Inclusive}};
  const auto tree = views::buildView(*handle, request);
  for (const auto& n : tree.nodes) {
    const auto& s = n.stats[0];
    EXPECT_DOUBLE_EQ(n.errors[0], static_cast<double>(s.count) * e);
    EXPECT_DOUBLE_EQ(n.errors[1], static_cast<double>(s.count) * e / 1000.0);
    EXPECT_DOUBLE_EQ(n.errors[2], e);
    EXPECT_TRUE(std::isnan(n.errors[3])) << "ratios get a mark, not a bound";
    EXPECT_EQ(n.errors[4], 0);
    EXPECT_EQ(n.withinSamplingError[3] != 0, s.max - e <= s.mean + static_cast<double>(s.count) * e / 1000.0);
  }
  // A hand-made case: 3 threads with 10, 10 and 11 samples of period 100 are balanced within
  // sampling error; 10, 10 and 20 are not.
  metrics::IntAccumulator a, b;
  for (auto [p, v] : {std::pair{0u, 1000u}, {1u, 1000u}, {2u, 1100u}}) a.accumulate(p, v);
  for (auto [p, v] : {std::pair{0u, 1000u}, {1u, 1000u}, {2u, 2000u}}) b.accumulate(p, v);
  EXPECT_TRUE(metrics::withinSamplingError(a.finalize(3, metrics::Population::All), Statistic::Imbalance, 99));
  EXPECT_FALSE(metrics::withinSamplingError(b.finalize(3, metrics::Population::All), Statistic::Imbalance, 99));
}

// --node accepts a procedure name anywhere (all its contexts combined like the Flat view's
// procedure), and the ids the Flat and Callers views print.
TEST_F(Distributions, DrillDownByNameAndByFlatAndCallersIds) {
  auto handle = storage::Database::open(db(1));
  views::ViewRequest flatRequest;
  flatRequest.kind = views::ViewKind::Flat;
  flatRequest.threads = "all";
  flatRequest.thresholdPercent = 0;
  const auto flat = views::buildView(*handle, flatRequest);
  views::ViewRequest callersRequest = flatRequest;
  callersRequest.kind = views::ViewKind::Callers;
  callersRequest.depth = 1;
  const auto callers = views::buildView(*handle, callersRequest);
  std::size_t procedures = 0, callersChecked = 0;
  for (const auto& n : flat.nodes) {
    if (n.kind != views::NodeKind::Procedure) continue;
    ++procedures;
    const auto byName =
        views::drillDown(*handle, views::resolveDrillTarget(*handle, n.name),
                         handle->metadata().metrics[0].descriptor.name, MetricScope::Inclusive, 16, "all");
    const auto byFlatId =
        views::drillDown(*handle, views::resolveDrillTarget(*handle, std::to_string(n.viewId), views::ViewKind::Flat),
                         handle->metadata().metrics[0].descriptor.name, MetricScope::Inclusive, 16, "all");
    // The drill-down's sum over threads is the Flat node's inclusive sum, by name and by id.
    EXPECT_DOUBLE_EQ(byName.all.sum, n.stats[0].sum) << n.name;
    EXPECT_DOUBLE_EQ(byFlatId.all.sum, n.stats[0].sum) << n.name;
    EXPECT_DOUBLE_EQ(byFlatId.all.max, byName.all.max) << n.name;
    for (const auto& c : callers.nodes) {
      if (c.depth != 1 || c.name != n.name) continue;
      const auto byCallersId = views::drillDown(
          *handle, views::resolveDrillTarget(*handle, std::to_string(c.viewId), views::ViewKind::Callers),
          handle->metadata().metrics[0].descriptor.name, MetricScope::Inclusive, 16, "all");
      EXPECT_DOUBLE_EQ(byCallersId.all.sum, c.stats[0].sum) << n.name;
      ++callersChecked;
    }
    // Exact percentiles in the drill-down agree with the Flat view's histogram within a bin.
    if (procedures > 20) break;
  }
  EXPECT_GT(procedures, 5u);
  EXPECT_GT(callersChecked, 5u);
  EXPECT_THROW(views::resolveDrillTarget(*handle, "no_such_procedure"), views::ViewError);
  EXPECT_THROW(views::resolveDrillTarget(*handle, "999999", views::ViewKind::Flat), views::ViewError);
  // The command line: --flat --node ID, --node NAME.
  const auto r = run(tool("csp-views") + " --flat --node 3 --threads all " + db(1).string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("flat node 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("median"), std::string::npos) << r.output;
}

}  // namespace
