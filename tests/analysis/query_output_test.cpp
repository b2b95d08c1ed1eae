// csp-query's output end to end: integers stay exact integers in text, CSV and JSON, reals
// print with round-trip precision; sets are JSON arrays and quoted lists in text and CSV; long
// quantifier chains answer and hopeless ones are refused; canned analyses warn like queries;
// processes without a process id are labelled by host and pid.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/query_db_fixtures.hpp"
#include "common/test_support.hpp"

namespace fs = std::filesystem;
using csp::test::LogSpec;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
using csp::test::withoutStderr;

namespace {

std::string runQuery(const fs::path& db, const std::string& q, const std::string& options = "") {
  const auto r = run(withoutStderr("timeout 120 " + tool("csp-query") + " " + db.string() + " '" + q + "' " + options));
  EXPECT_EQ(r.status, 0) << q.substr(0, 200) << "\n" << r.output;
  return r.output;
}

// Durations printed as 1e+15 (6 significant digits), 2^55 + 1 as 3.602879701896397e+16 in JSON,
// ratios as 0.428571.
TEST(QueryOutput, IntegersStayExactAndRealsRoundTrip) {
  TempDir tmp("query-numbers");
  LogSpec spec;
  constexpr std::uint64_t kHuge = (std::uint64_t{1} << 55) + 1;
  auto& t0 = spec.thread(0, 0, 100);
  LogSpec::span(t0, 0, kHuge, "huge");
  LogSpec::span(t0, kHuge, kHuge + 1'000'000'000'000'000, "peta");
  LogSpec::span(t0, kHuge + 1'000'000'000'000'000, kHuge + 1'000'000'000'000'003, "three");
  LogSpec::span(t0, kHuge + 1'000'000'000'000'003, kHuge + 1'000'000'000'000'010, "seven");
  const auto db = spec.database(tmp.path());

  const auto csv = runQuery(db, "Duration((0, huge))", "--format csv");
  EXPECT_EQ(csv, "result,unit,rank 0 n1 pid 100\nvalue,ns,36028797018963969\n") << csv;
  EXPECT_NE(runQuery(db, "Duration((0, huge))").find(" 36028797018963969\n"), std::string::npos);
  const auto json = nlohmann::json::parse(runQuery(db, "Duration((0, huge))", "--format json"));
  ASSERT_TRUE(json["rows"][0]["values"][0].is_number_integer()) << json.dump();
  EXPECT_EQ(json["rows"][0]["values"][0].get<std::uint64_t>(), kHuge);
  const auto area = nlohmann::json::parse(runQuery(db, "Area(exists t: (t, huge))", "--format json"));
  EXPECT_EQ(area["rows"][0]["values"][0].get<std::uint64_t>(), kHuge) << area.dump();
  // Sums, differences and products of integers are integers.
  EXPECT_EQ(runQuery(db, "Duration((0, peta))", "--format csv"),
            "result,unit,rank 0 n1 pid 100\nvalue,ns,1000000000000000\n");
  EXPECT_NE(
      runQuery(db, "2 * Duration((0, huge)) - Duration((0, huge)) + 0", "--format csv").find(",36028797018963969\n"),
      std::string::npos);
  // A ratio: the shortest text that reads back as the same double.
  const auto ratio = runQuery(db, "Duration((0, three)) / Duration((0, seven))", "--format csv");
  EXPECT_EQ(ratio, "result,unit,rank 0 n1 pid 100\nvalue,,0.42857142857142855\n") << ratio;
  const auto ratioJson =
      nlohmann::json::parse(runQuery(db, "Duration((0, three)) / Duration((0, seven))", "--format json"));
  EXPECT_EQ(ratioJson["rows"][0]["values"][0].get<double>(), 3.0 / 7.0);
  EXPECT_NE(runQuery(db, "Duration((0, three)) / Duration((0, seven))").find("0.42857142857142855"), std::string::npos);
  // Canned analyses too.
  const auto canned =
      run(withoutStderr(tool("csp-query") + " " + db.string() + " --canned barrier huge --format json"));
  EXPECT_EQ(nlohmann::json::parse(canned.output)["rows"][0]["values"][0].get<std::uint64_t>(), kHuge) << canned.output;
}

// WhatRegions joined names with spaces: "a b" and the pair a, b printed alike.
TEST(QueryOutput, SetsAreArraysAndQuotedLists) {
  TempDir tmp("query-lists");
  LogSpec spec;
  auto& t0 = spec.thread(0, 0, 100);
  LogSpec::span(t0, 0, 10, "a b");
  LogSpec::span(t0, 10, 20, "a");
  auto& t1 = spec.thread(0, 1, 100);
  LogSpec::span(t1, 5, 15, "b");
  LogSpec::span(t1, 15, 25, "say \"hi\", (x)");
  const auto db = spec.database(tmp.path());
  const std::string q = "WhatRegions(exists t: exists r: (t, r))";
  const auto json = nlohmann::json::parse(runQuery(db, q, "--format json"));
  EXPECT_EQ(json["rows"][0]["values"][0], nlohmann::json({"a", "a b", "b", "say \"hi\", (x)"})) << json.dump();
  const auto threads =
      nlohmann::json::parse(runQuery(db, "WhichThreads(exists t: (t, b) or (t, \"a b\"))", "--format json"));
  EXPECT_EQ(threads["rows"][0]["values"][0], nlohmann::json({0, 1})) << threads.dump();
  const std::string list = R"x(a "a b" b "say \"hi\", (x)")x";
  EXPECT_NE(runQuery(db, q).find(list), std::string::npos) << runQuery(db, q);
  // CSV quotes the whole list once more (RFC 4180: quotes doubled).
  const auto csv = runQuery(db, q, "--format csv");
  EXPECT_NE(csv.find(R"x(WhatRegions,regions,"a ""a b"" b ""say \""hi\"", (x)""")x"), std::string::npos) << csv;
  // Frame listings quote the same way.
  const auto frames = runQuery(db, "exists t: (t, \"a b\")");
  EXPECT_NE(frames.find(R"([0, 5) ns  (0, "a b"))"), std::string::npos) << frames;
}

// 4 threads x 240 events: forall chains took 39 s (K = 10) and 111 s (K = 11), and 16 (the
// documented bound) days. Only the timeout is a clock here.
TEST(QueryOutput, QuantifierChainsAnswerOrAreRefusedAtOnce) {
  TempDir tmp("query-chains");
  LogSpec spec;
  for (int t = 0; t < 4; ++t) {
    auto& th = spec.thread(0, t, 100);
    std::uint64_t at = static_cast<std::uint64_t>(t) * 3;
    for (int i = 0; i < 120; ++i) {
      LogSpec::span(th, at, at + 5 + static_cast<std::uint64_t>((i * 7 + t) % 16), "compute");
      at += 6 + static_cast<std::uint64_t>((i * 7 + t) % 16) + static_cast<std::uint64_t>((i + 3 * t) % 10);
    }
  }
  const auto db = spec.database(tmp.path());
  auto chain = [](const std::string& q, int k) {
    std::string out;
    for (int i = 0; i < k; ++i) out += q + " t" + std::to_string(i) + ": ";
    for (int i = 0; i < k; ++i) out += (i ? " and " : "") + std::string("(t") + std::to_string(i) + ", compute)";
    return "Duration(" + out + ")";
  };
  const auto any = runQuery(db, "Duration(exists t: (t, compute))", "--format csv");
  ASSERT_NE(any.find("value,ns,"), std::string::npos);
  for (int k : {11, 16}) {
    EXPECT_EQ(runQuery(db, chain("forall", k), "--format csv"), any) << k;
    EXPECT_EQ(runQuery(db, chain("exists", k), "--format csv"), any) << k;
  }
  const auto refused = run("timeout 120 " + tool("csp-query") + " " + db.string() + " '" + chain("exists1", 16) + "'");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_EQ(refused.output.rfind("csp-query: error: the query needs up to ", 0), 0u) << refused.output;
  EXPECT_NE(refused.output.find("more than the limit"), std::string::npos) << refused.output;
  EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1) << refused.output;
}

TEST(QueryOutput, CannedWarningsAndLabelsWithoutProcessId) {
  TempDir tmp("query-labels");
  LogSpec spec;
  LogSpec::span(spec.thread(std::nullopt, 0, 4242, "localhost"), 0, 10, "solve");
  const auto db = spec.database(tmp.path());
  const auto r = run(tool("csp-query") + " " + db.string() + " --canned imbalance slove --format csv");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("csp-query: warning: no region named 'slove'"), std::string::npos) << r.output;
  const auto label = runQuery(db, "Duration((0, solve))", "--format csv");
  EXPECT_EQ(label, "result,unit,localhost pid 4242\nvalue,ns,10\n") << label;
}

}  // namespace
