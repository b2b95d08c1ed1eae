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
  const auto p = run("timeout 120 " + tool("csp-prof-mpi") + " " + (tmp / "m").string() + " -o " + (tmp / "db").string());
  ASSERT_EQ(p.status, 0) << p.output;

  std::map<std::string, double> expected;
  std::map<int, double> large;
  {
    std::ifstream in(tmp / "expected.txt");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string key;
      f >> key;
      if (key == "large") {
        int t;
        double ns;
        f >> t >> ns;
        large[t] = ns;
      } else {
        f >> expected[key];
      }
    }
  }
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_EQ(large.size(), 4u);

  auto q = [&](const std::string& query) {
    const auto r = run(tool("csp-query") + " " + (tmp / "db").string() + " '" + query + "' --format json");
    EXPECT_EQ(r.status, 0) << query << "\n" << r.output;
    return r.output;
  };
  // The program's clock readings enclose the region calls: a few microseconds of slack.
  constexpr double kSlackNs = 50'000;
  const double bound = (expected["main"] - expected["read"] - expected["write"]) / expected["main"];
  const auto upper = q("(Duration((t, main)) - (Duration((t, read)) + Duration((t, write)))) / Duration((t, main))");
  EXPECT_NEAR(jsonValue(upper, "t=0"), bound, 3 * kSlackNs / expected["main"]) << upper;
  EXPECT_EQ(jsonValue(upper, "t=1"), -1) << "undefined for a thread without main: " << upper;
  const auto whole = q("Duration((t, main) || (t, bs_thread))");
  EXPECT_NEAR(jsonValue(whole, "t=0"), expected["main"], kSlackNs) << whole;
  const auto which = q("WhatRegions((0, main) || (0, bs_thread))");
  EXPECT_NE(which.find("\"main\""), std::string::npos) << which;
  EXPECT_EQ(which.find("bs_thread"), std::string::npos) << which;
  // Data-centric: time in chunks of size >= 4000, per worker, from the attribute of "price".
  const auto big = q("Duration((t, price, attr >= 4000))");
  for (const auto& [t, ns] : large) EXPECT_NEAR(jsonValue(big, "t=" + std::to_string(t)), ns, 3 * kSlackNs) << t;
  const auto classes = q("class SMALL = attr < 4000; class LARGE = [4000, inf); Duration((1, price, LARGE))");
  EXPECT_NEAR(jsonValue(classes, "value"), large[1], 3 * kSlackNs) << classes;
  // The workers overlap: at most 4 at once, and the read and write phases have only main active.
  const auto par = q("MaxPar(exists t: (t, bs_thread))");
  EXPECT_EQ(jsonValue(par, "value"), 4);
  const auto alone = q("Duration((0, read) and forall t: (t, main))");
  EXPECT_NEAR(jsonValue(alone, "value"), expected["read"], kSlackNs) << alone;
}

}  // namespace
