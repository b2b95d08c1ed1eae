// csp-query end to end: a csp-gen JSON description with region events (and attributes) ->
// csp-prof-mpi with 1 and 3 processes (identical answers) -> csp-query; errors and databases
// without logs.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/storage/profile_io.hpp"

namespace fs = std::filesystem;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

std::string sample() {
  return R"("samples": [{"path": [{"proc": "main", "file": "m.c", "line": 1}, {"stmt": "m.c:2"}], "counts": {"cycles": 1}}])";
}

std::string thread(int rank, int thread, int pid, const std::string& events) {
  return "{\"id\": {\"rank\": " + std::to_string(rank) + ", \"thread\": " + std::to_string(thread) +
         "}, \"hostname\": \"n1\", \"pid\": " + std::to_string(pid) + ", " + sample() + ", \"events\": [" + events +
         "]}";
}

std::string ev(std::uint64_t t, const char* kind, const std::string& region, const std::string& extra = "") {
  return "{\"t\": " + std::to_string(t) + ", \"" + kind + "\": \"" + region + "\"" + extra + "}";
}

// Rank 0: the log of the Fig. 3.2 tests (three threads, regions 0 and 1). Rank 1: the same with
// every time doubled and a fourth thread without events. Rank 2: attributes.
void writeSpec(const fs::path& file) {
  auto fig = [](int rank, int pid, int scale) {
    auto s = [&](std::uint64_t t) { return t * static_cast<std::uint64_t>(scale) + 1000; };
    std::string out;
    out += thread(rank, 0, pid,
                  ev(s(0), "enter", "region-0") + "," + ev(s(100), "exit", "region-0") + "," +
                      ev(s(100), "enter", "region-1") + "," + ev(s(150), "exit", "region-1")) +
           ",";
    out += thread(rank, 1, pid,
                  ev(s(20), "enter", "region-1") + "," + ev(s(60), "exit", "region-1") + "," +
                      ev(s(60), "enter", "region-0") + "," + ev(s(80), "enter", "region-0/region-1") + "," +
                      ev(s(100), "exit", "region-0/region-1") + "," + ev(s(120), "exit", "region-0")) +
           ",";
    out += thread(rank, 2, pid, ev(s(40), "enter", "region-0") + "," + ev(s(140), "exit", "region-0"));
    return out;
  };
  std::ofstream out(file);
  out << R"({"metrics": [{"name": "cycles", "unit": "cycles", "kind": "sampled", "period": 1}], "threads": [)";
  out << fig(0, 100, 1) << "," << fig(1, 101, 2) << ",";
  out << "{\"id\": {\"rank\": 1, \"thread\": 3}, \"hostname\": \"n1\", \"pid\": 101, " << sample() << "},";
  out << thread(2, 0, 102,
                ev(0, "enter", "update", ", \"attr\": 5") + "," + ev(10, "exit", "update") + "," +
                    ev(10, "enter", "update", ", \"attr\": 150") + "," + ev(40, "exit", "update") + "," +
                    ev(40, "enter", "update", ", \"attr\": -100") + "," + ev(60, "exit", "update"));
  out << "]}";
}

std::string query(const fs::path& db, const std::string& q, const std::string& options = "") {
  const auto r = run(tool("csp-query") + " " + db.string() + " '" + q + "' " + options + " 2>/dev/null");
  EXPECT_EQ(r.status, 0) << q << "\n" << r.output;
  return r.output;
}

class QueryCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir("query-cli");
    writeSpec(*tmp_ / "spec.json");
    auto g = run(tool("csp-gen") + " --from-json " + (*tmp_ / "spec.json").string() + " -o " + (*tmp_ / "m").string());
    ASSERT_EQ(g.status, 0) << g.output;
    auto p1 =
        run("timeout 120 " + tool("csp-prof-mpi") + " " + (*tmp_ / "m").string() + " -o " + (*tmp_ / "db1").string());
    ASSERT_EQ(p1.status, 0) << p1.output;
    auto p3 = run("timeout 180 " + csp::test::mpirun(3) + tool("csp-prof-mpi") + " " + (*tmp_ / "m").string() + " -o " +
                  (*tmp_ / "db3").string());
    ASSERT_EQ(p3.status, 0) << p3.output;
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static TempDir* tmp_;
};
TempDir* QueryCli::tmp_ = nullptr;

TEST_F(QueryCli, SameAnswersWithOneAndThreeProcesses) {
  const std::vector<std::string> queries = {
      "Duration(∃t : (t, 0))",
      "Area(forall r: exists t: (t, r))",
      "Duration(∀t : ∃1 r : (t, r))",
      "Duration((t, 0))",
      "WhichThreads(exists t: (t, 1))",
      "exists t: (t, 1)",
      "Duration((0, update, attr >= 100))",
  };
  for (const auto& q : queries)
    for (const char* format : {"text", "csv", "json"}) {
      const std::string opt = std::string("--format ") + format;
      EXPECT_EQ(query(*tmp_ / "db1", q, opt), query(*tmp_ / "db3", q, opt)) << q << " " << format;
    }
  const auto canned1 = run(tool("csp-query") + " " + (*tmp_ / "db1").string() + " --canned imbalance --format csv");
  const auto canned3 = run(tool("csp-query") + " " + (*tmp_ / "db3").string() + " --canned imbalance --format csv");
  EXPECT_EQ(canned1.status, 0) << canned1.output;
  EXPECT_EQ(canned1.output, canned3.output);
}

TEST_F(QueryCli, ValuesPerProcessSideBySide) {
  // Rank 0 has the Fig. 3.2 log (140 ns), rank 1 the same twice as slow (280 ns), rank 2 none of it.
  const auto csv = query(*tmp_ / "db3", "Duration(∃t : (t, 0))", "--format csv");
  EXPECT_EQ(csv,
            "result,unit,rank 0 n1 pid 100,rank 1 n1 pid 101,rank 2 n1 pid 102,min,median,max\n"
            "value,ns,140,280,0,0,140,280\n")
      << csv;
  const auto perThread = query(*tmp_ / "db1", "Duration((t, 0))", "--format csv");
  EXPECT_NE(perThread.find("t=1,ns,60,120,-,60,90,120"), std::string::npos) << perThread;
  // Threads without events are not part of a process's log.
  EXPECT_EQ(perThread.find("t=3"), std::string::npos) << perThread;
  const auto attr = query(*tmp_ / "db1", "Duration((0, update, attr in (100, inf)))", "--format csv");
  EXPECT_NE(attr.find("value,ns,0,0,30,0,0,30"), std::string::npos) << attr;
  const auto negative = query(*tmp_ / "db1", "Duration((0, update, attr < 0))", "--format csv");
  EXPECT_NE(negative.find("value,ns,0,0,20,"), std::string::npos) << negative;
  const auto text = query(*tmp_ / "db1", "exists1 t: (t, 0)");
  EXPECT_NE(text.find("rank 0 n1 pid 100: 3 frames, 60 ns"), std::string::npos) << text;
  EXPECT_NE(text.find("[0, 20) ns  (0, region-0)"), std::string::npos) << text;
}

TEST_F(QueryCli, ErrorsAreOneLineWithExitStatus) {
  const auto bad = run(tool("csp-query") + " " + (*tmp_ / "db1").string() + " 'Duration(exists t (t, 0))'");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("csp-query: error: query: column 19: expected ':'"), std::string::npos) << bad.output;
  const auto missing = run(tool("csp-query") + " " + (*tmp_ / "nosuch").string() + " 'Duration((0,0))'");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("csp-query: error: " + (*tmp_ / "nosuch").string() + ": no such database"),
            std::string::npos)
      << missing.output;
  const auto noQuery = run(tool("csp-query") + " " + (*tmp_ / "db1").string());
  EXPECT_EQ(noQuery.status, 2);
  EXPECT_NE(noQuery.output.find("no query given"), std::string::npos) << noQuery.output;
  const auto badOption = run(tool("csp-query") + " " + (*tmp_ / "db1").string() + " 'Duration((0,0))' --format xml");
  EXPECT_EQ(badOption.status, 2);
  const auto canned = run(tool("csp-query") + " " + (*tmp_ / "db1").string() + " --canned straggler loop");
  EXPECT_EQ(canned.status, 1);
  EXPECT_NE(canned.output.find("csp-query: error: canned analysis straggler takes LOOP BARRIER"), std::string::npos)
      << canned.output;
  const auto list = run(tool("csp-query") + " --list-canned");
  EXPECT_EQ(list.status, 0);
  for (const char* name : {"imbalance", "contention", "pipeline", "straggler", "barrier"})
    EXPECT_NE(list.output.find(name), std::string::npos) << name;
  const auto warn = run(tool("csp-query") + " " + (*tmp_ / "db1").string() + " 'Duration((0, nosuch))'");
  EXPECT_EQ(warn.status, 0);
  EXPECT_NE(warn.output.find("csp-query: warning: no region named 'nosuch'"), std::string::npos) << warn.output;
}

// The parser's limits and range errors reach the user as query errors (exit 1, the column
// marked), never as a crash (deep nesting overflowed the stack) or a bare "stoull".
TEST_F(QueryCli, LimitsAndRangeErrorsAreQueryErrors) {
  const std::string db = (*tmp_ / "db1").string();
  auto expectQueryError = [&](const std::string& q, const std::string& message) {
    const auto r = run(tool("csp-query") + " " + db + " '" + q + "'");
    EXPECT_EQ(r.status, 1) << q.substr(0, 80) << ": " << r.output.substr(0, 400);
    EXPECT_EQ(r.output.rfind("csp-query: error: query: column ", 0), 0u) << r.output.substr(0, 400);
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output.substr(0, 400);
  };
  expectQueryError("Duration(" + std::string(20000, '(') + "(0, 0)" + std::string(20000, ')') + ")",
                   "column 265: the query nests more than 256 levels deep");
  std::string nots;
  for (int i = 0; i < 30000; ++i) nots += "not ";
  expectQueryError("Duration(" + nots + "(0, 0))", "nests more than 256 levels deep");
  std::string exists;
  for (int i = 0; i < 100; ++i) exists += "exists t: ";
  expectQueryError("Duration(" + exists + "(t, 0))", "column 27: variable 't' is already bound at column 17");
  expectQueryError("Duration(exists999999999999999999999 t: (t, 0))", "does not fit 64 bits");
  expectQueryError("Duration((18446744073709551616, 0))",
                   "column 11: the number 18446744073709551616 does not fit 64 bits");
  expectQueryError("Duration((0, update, attr in (5, 3)))", "column 30: the range ends before it begins");
  // Just under the limit: answered.
  const auto ok = query(*tmp_ / "db1", "Duration(" + std::string(255, '(') + "(0, 0)" + std::string(255, ')') + ")",
                        "--format csv");
  EXPECT_NE(ok.find("value,ns,100,200,0,"), std::string::npos) << ok;
}

// Region names are any bytes (csp_region_begin takes a C string): JSON output replaces invalid
// UTF-8 by U+FFFD instead of failing with "invalid UTF-8 byte"; text and CSV keep the bytes.
TEST(QueryCliNames, NamesThatAreNotUtf8) {
  TempDir tmp("query-latin1");
  {
    std::ofstream out(tmp / "spec.json");
    out << R"({"metrics": [{"name": "cycles", "unit": "cycles", "kind": "sampled", "period": 1}], "threads": [)"
        << thread(0, 0, 100,
                  ev(0, "enter", "badXname") + "," + ev(10, "exit", "badXname") + "," + ev(10, "enter", "ok") + "," +
                      ev(30, "exit", "ok"))
        << "," << thread(0, 1, 100, ev(5, "enter", "badXname") + "," + ev(25, "exit", "badXname")) << "]}";
  }
  ASSERT_EQ(
      run(tool("csp-gen") + " -q --from-json " + (tmp / "spec.json").string() + " -o " + (tmp / "m").string()).status,
      0);
  // JSON cannot carry a raw invalid byte: put it into the profiles' region names.
  const std::string bad =
      "bad\xff"
      "name";
  for (const auto& f : csp::storage::listProfiles(tmp / "m")) {
    auto p = csp::storage::readProfile(f);
    for (auto& n : p.regions.names)
      if (n == "badXname") n = bad;
    csp::storage::writeProfile(p, f);
  }
  ASSERT_EQ(run("timeout 120 " + tool("csp-prof-mpi") + " -q " + (tmp / "m").string() + " -o " + (tmp / "db").string())
                .status,
            0);
  const std::string replaced =
      "bad\xef\xbf\xbd"
      "name";
  const std::string db = (tmp / "db").string();
  // (request, whether its output names the region)
  const std::vector<std::pair<std::string, bool>> requests = {
      {"--canned imbalance", true},
      {"--canned barrier '" + bad + "'", false},
      {"'WhatRegions(exists r: (0, r))'", true},
      {"'exists t: (t, \"" + bad + "\")'", true},
      {"'Duration(exists t: (t, \"" + bad + "\"))'", false},
  };
  for (const auto& [request, named] : requests) {
    const auto json = run(tool("csp-query") + " " + db + " " + request + " --format json 2>/dev/null");
    EXPECT_EQ(json.status, 0) << request << ": " << json.output;
    EXPECT_TRUE(nlohmann::json::accept(json.output)) << request << ": " << json.output;
    if (named) {
      EXPECT_NE(json.output.find(replaced), std::string::npos) << request << ": " << json.output;
    }
    for (const char* format : {"text", "csv"}) {
      const auto r = run(tool("csp-query") + " " + db + " " + request + " --format " + format + " 2>/dev/null");
      EXPECT_EQ(r.status, 0) << request << " " << format << ": " << r.output;
      if (named) {
        EXPECT_NE(r.output.find(bad), std::string::npos) << request << " " << format << ": " << r.output;
      }
    }
  }
  const auto value =
      run(tool("csp-query") + " " + db + " 'Duration(exists t: (t, \"" + bad + "\"))' --format json 2>/dev/null");
  EXPECT_EQ(nlohmann::json::parse(value.output)["rows"][0]["values"][0], 25) << value.output;
}

TEST(QueryCliNoLogs, DatabaseWithoutLogsSaysHowToGetThem) {
  TempDir tmp("query-nologs");
  {
    std::ofstream out(tmp / "spec.json");
    out << R"({"metrics": [{"name": "cycles", "unit": "cycles", "kind": "sampled", "period": 1}], "threads": [{"id": {"thread": 0}, )"
        << sample() << R"(, "regions": [{"path": "solve", "count": 1, "inclusive_ns": 10}]}]})";
  }
  ASSERT_EQ(
      run(tool("csp-gen") + " --from-json " + (tmp / "spec.json").string() + " -o " + (tmp / "m").string()).status, 0);
  ASSERT_EQ(
      run("timeout 120 " + tool("csp-prof-mpi") + " " + (tmp / "m").string() + " -o " + (tmp / "db").string()).status,
      0);
  auto r = run(tool("csp-query") + " " + (tmp / "db").string() + " 'Duration((0, solve))'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("has no region event logs: the program was measured without --region-log"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("csp-run --region-log"), std::string::npos) << r.output;
  // A database of format 1.0 has no region_events family at all.
  {
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, (tmp / "db").string(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const auto& n : names) descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, (tmp / "db").string(), descriptors, &handles, &raw).ok());
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == "region_events") {
        ASSERT_TRUE(raw->DropColumnFamily(handles[i]).ok());
      }
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    delete raw;
    csp::test::pretendFormat(tmp / "db", 1, 0);
  }
  r = run(tool("csp-query") + " " + (tmp / "db").string() + " 'Duration((0, solve))'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("format 1.0, written before CSP stored them); run csp-prof-mpi again"), std::string::npos)
      << r.output;
}

}  // namespace
