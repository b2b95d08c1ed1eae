// §3.2's upper-bound query on a real program: tests/apps/blackscholes.cpp measured with
// csp-run --region-log, reduced with csp-prof-mpi, queried with csp-query; compared with what the
// program measured itself around its region calls.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include "common/test_support.hpp"

using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

// The row `name` of a --format json table, first process.
double jsonValue(const std::string& out, const std::string& name) {
  const auto j = nlohmann::json::parse(out);
  for (const auto& row : j["rows"])
    if (row["name"] == name) return row["values"][0].is_null() ? -1 : row["values"][0].get<double>();
  ADD_FAILURE() << "no row " << name << " in " << out;
  return -1;
}

TEST(QueryMeasured, BlackscholesUpperBoundMatchesTheProgramsOwnClock) {
  TempDir tmp("query-measured");
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-blackscholes";
  const auto m = run("timeout 120 " + tool("csp-run") + " --region-log -o " + (tmp / "m").string() + " -- " + app +
                     " " + (tmp / "expected.txt").string() + " 4 6");
  ASSERT_EQ(m.status, 0) << m.output;
  const auto p =
      run("timeout 120 " + tool("csp-prof-mpi") + " " + (tmp / "m").string() + " -o " + (tmp / "db").string());
  ASSERT_EQ(p.status, 0) << p.output;

  // What the program read around (outer) and inside (inner) each region's calls.
  struct Bounds {
    double outer = 0, inner = 0;
  };
  std::map<std::string, Bounds> expected;
  std::map<int, Bounds> large;
  {
    std::ifstream in(tmp / "expected.txt");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string key;
      f >> key;
      Bounds b;
      if (key == "large") {
        int t;
        f >> t >> b.outer >> b.inner;
        large[t] = b;
      } else {
        f >> b.outer >> b.inner;
        expected[key] = b;
      }
      ASSERT_TRUE(f && b.inner <= b.outer) << line;
    }
  }
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_EQ(large.size(), 4u);
  // The library's clock readings lie between the program's: exact bounds, whatever the load.
  auto expectWithin = [](double value, const Bounds& b, const std::string& what) {
    EXPECT_GE(value, b.inner) << what;
    EXPECT_LE(value, b.outer) << what;
  };

  auto q = [&](const std::string& query) {
    const auto r = run(tool("csp-query") + " " + (tmp / "db").string() + " '" + query + "' --format json");
    EXPECT_EQ(r.status, 0) << query << "\n" << r.output;
    return r.output;
  };
  const auto& mn = expected["main"];
  const auto& rd = expected["read"];
  const auto& wr = expected["write"];
  const auto upper = q("(Duration((t, main)) - (Duration((t, read)) + Duration((t, write)))) / Duration((t, main))");
  const double bound = jsonValue(upper, "t=0");
  EXPECT_GE(bound, 1 - (rd.outer + wr.outer) / mn.inner) << upper;
  EXPECT_LE(bound, 1 - (rd.inner + wr.inner) / mn.outer) << upper;
  EXPECT_EQ(jsonValue(upper, "t=1"), -1) << "undefined for a thread without main: " << upper;
  const auto whole = q("Duration((t, main) || (t, bs_thread))");
  expectWithin(jsonValue(whole, "t=0"), mn, whole);
  const auto which = q("WhatRegions((0, main) || (0, bs_thread))");
  EXPECT_NE(which.find("\"main\""), std::string::npos) << which;
  EXPECT_EQ(which.find("bs_thread"), std::string::npos) << which;
  // Data-centric: time in chunks of size >= 4000, per worker, from the attribute of "price".
  const auto big = q("Duration((t, price, attr >= 4000))");
  for (const auto& [t, b] : large) expectWithin(jsonValue(big, "t=" + std::to_string(t)), b, big);
  const auto classes = q("class SMALL = attr < 4000; class LARGE = [4000, inf); Duration((1, price, LARGE))");
  expectWithin(jsonValue(classes, "value"), large[1], classes);
  // The workers overlap: at most 4 at once, and the read and write phases have only main active.
  const auto par = q("MaxPar(exists t: (t, bs_thread))");
  EXPECT_EQ(jsonValue(par, "value"), 4);
  const auto alone = q("Duration((0, read) and forall t: (t, main))");
  expectWithin(jsonValue(alone, "value"), rd, alone);
}

}  // namespace
