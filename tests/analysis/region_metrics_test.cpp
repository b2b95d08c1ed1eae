// The region concurrency metrics of csp-prof-mpi (csp-views --regions: any-time, all-time, area,
// straggler-time, max-parallelism) are the frame engine's answers, as csp-query gives them: a
// hand-over at one nanosecond is no overlap, and random logs with many simultaneous events give
// the same numbers both ways (docs/postprocessing.md, "Regions").
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <random>
#include <sstream>

#include "analysis/query_db_fixtures.hpp"
#include "common/test_support.hpp"

namespace fs = std::filesystem;
using csp::test::LogSpec;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
using csp::test::withoutStderr;

namespace {

const char* const kMetrics[] = {"any-time", "all-time", "area", "straggler-time", "max-parallelism"};

// Region name -> metric -> csp-views --regions value (sums over the processes).
std::map<std::string, std::map<std::string, std::string>> regionView(const fs::path& db) {
  const auto r =
      run("timeout 120 " + tool("csp-views") +
          " --regions -m any-time,all-time,area,straggler-time,max-parallelism -s sum --scope exclusive -t 0 "
          "--format csv " +
          db.string());
  EXPECT_EQ(r.status, 0) << r.output;
  std::istringstream in(r.output);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  {
    std::istringstream h(line);
    for (std::string f; std::getline(h, f, ',');) header.push_back(f);
  }
  std::map<std::string, std::map<std::string, std::string>> out;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::vector<std::string> fields;
    for (std::string f; std::getline(l, f, ',');) fields.push_back(f);
    for (std::size_t i = 0; i < header.size() && i < fields.size(); ++i)
      for (const char* m : kMetrics)
        if (header[i] == std::string(m) + ":sum:E") out[fields[4]][m] = fields[i];
  }
  return out;
}

// csp-query's value per process.
std::vector<double> queryValues(const fs::path& db, const std::string& q) {
  // Other processes lack the region: their warnings go to /dev/null.
  const auto r =
      run(withoutStderr("timeout 120 " + tool("csp-query") + " " + db.string() + " '" + q + "' --format json"));
  EXPECT_EQ(r.status, 0) << q << "\n" << r.output;
  const auto json = nlohmann::json::parse(r.output);
  std::vector<double> out;
  for (const auto& v : json["rows"][0]["values"]) out.push_back(v.get<double>());
  return out;
}

// The metrics as queries over one process with `threads` threads.
std::map<std::string, std::string> asQueries(const std::string& region, int threads) {
  const std::string R = "\"" + region + "\"";
  return {{"any-time", "Duration(exists t: (t, " + R + "))"},
          {"all-time", "Duration(exists" + std::to_string(threads) + " t: (t, " + R + "))"},
          {"area", "Area(exists t: (t, " + R + "))"},
          {"straggler-time", threads > 1 ? "Duration(exists1 t: (t, " + R + "))" : "0"},
          {"max-parallelism", "MaxPar(exists t: (t, " + R + "))"}};
}

// Thread 1 leaves cs at t = 10 and thread 0 enters it at t = 10: never two threads in cs.
TEST(RegionMetrics, HandOverAtTheSameNanosecondIsNoOverlap) {
  TempDir tmp("region-handover");
  LogSpec spec;
  LogSpec::span(spec.thread(std::nullopt, 0, 1, "localhost"), 10, 20, "cs");
  LogSpec::span(spec.thread(std::nullopt, 1, 1, "localhost"), 0, 10, "cs");
  const auto db = spec.database(tmp.path());
  const auto view = regionView(db);
  EXPECT_EQ(view.at("cs").at("max-parallelism"), "1");
  EXPECT_EQ(view.at("cs").at("any-time"), "20");
  EXPECT_EQ(view.at("cs").at("area"), "20");
  EXPECT_EQ(view.at("cs").at("straggler-time"), "20");
  EXPECT_EQ(view.at("cs").at("all-time"), "0");
  EXPECT_EQ(queryValues(db, "MaxPar(exists t: (t, cs))"), std::vector<double>{1});
}

// Random logs of five processes (2 to 4 threads; regions a, b and c inside a, named per process)
// on a 10 ns grid, so that many enters and exits of different threads fall on one nanosecond.
TEST(RegionMetrics, EqualTheFrameEnginesAnswersOnRandomLogs) {
  TempDir tmp("region-random");
  LogSpec spec;
  std::mt19937 rng(7);
  std::vector<int> threadsOf;
  for (int p = 0; p < 5; ++p) {
    const std::string k = std::to_string(p);
    const int threads = 2 + static_cast<int>(rng() % 3);
    threadsOf.push_back(threads);
    for (int t = 0; t < threads; ++t) {
      auto& th = spec.thread(p, t, 100 + p);
      std::uint64_t at = 10 * (rng() % 3);
      for (int i = 0; i < 12; ++i) {
        const std::uint64_t length = 10 * (1 + rng() % 4);
        switch (rng() % 3) {
          case 0:
            LogSpec::enter(th, at, "a" + k);
            LogSpec::span(th, at + 10 * (rng() % 2), at + length, "a" + k + "/c" + k);
            LogSpec::exit(th, at + length + 10 * (rng() % 2), "a" + k);
            at += length + 10;
            break;
          case 1:
            LogSpec::span(th, at, at + length, "a" + k);
            break;
          default:
            LogSpec::span(th, at, at + length, "b" + k);
            break;
        }
        at += length + 10 * (rng() % 2);
      }
    }
  }
  const auto db = spec.database(tmp.path());
  const auto view = regionView(db);
  for (int p = 0; p < 5; ++p) {
    const std::string k = std::to_string(p);
    for (const std::string& region : {"a" + k, "b" + k, "c" + k}) {
      ASSERT_TRUE(view.count(region)) << region;
      for (const auto& [metric, q] : asQueries(region, threadsOf[static_cast<std::size_t>(p)])) {
        const auto values = queryValues(db, q);
        ASSERT_EQ(values.size(), 5u) << q;
        EXPECT_EQ(std::stod(view.at(region).at(metric)), values[static_cast<std::size_t>(p)])
            << region << " " << metric << ": " << q;
      }
    }
  }
}

}  // namespace
