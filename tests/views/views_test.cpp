// Views end to end: exact profiles (csp-gen --from-json) -> csp-prof-mpi -> views, checked against
// hand-computed values (thesis Fig. 7.5, recursion, instance counting of Fig. 7.7).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_support.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_builder.hpp"
#include "csp/storage/profile_io.hpp"
#include "csp/views/render.hpp"

using namespace csp;
using namespace csp::views;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

constexpr auto I = storage::MetricScope::Inclusive;
constexpr auto E = storage::MetricScope::Exclusive;

// Label of a view node for lookups: procedures by name, callers entries as name@file:line,
// loops "loop f:l", call sites "call f:l", statements "f:l".
std::string testLabel(const ViewTree& t, const TreeNode& n) {
  auto fl = [&] { return n.file + ":" + std::to_string(n.line); };
  switch (n.kind) {
    case NodeKind::Procedure:
      if (t.kind == ViewKind::Callers && n.depth >= 2) return n.name + "@" + fl();
      return n.name;
    case NodeKind::Loop:
      return "loop " + fl();
    case NodeKind::CallSite:
      return "call " + fl();
    case NodeKind::Statement:
      return fl();
    default:
      return n.name;
  }
}

// The node reached from the top by this path of labels; fails the test if there is none.
const TreeNode& at(const ViewTree& t, const std::vector<std::string>& path) {
  std::uint32_t cur = t.roots.at(0);
  for (const auto& label : path) {
    bool found = false;
    for (auto c : t.nodes[cur].children)
      if (testLabel(t, t.nodes[c]) == label) {
        cur = c;
        found = true;
        break;
      }
    if (!found) {
      std::string have;
      for (auto c : t.nodes[cur].children) have += " [" + testLabel(t, t.nodes[c]) + "]";
      ADD_FAILURE() << "no child '" << label << "' below '" << testLabel(t, t.nodes[cur]) << "'; children:" << have;
      static TreeNode none;
      none.stats.assign(8, metrics::Statistics{});
      none.values.assign(8, NAN);
      return none;
    }
  }
  return t.nodes[cur];
}

// Column indices of the default request: inclusive sum, exclusive sum.
constexpr std::size_t kI = 0, kE = 1;

double incl(const ViewTree& t, const std::vector<std::string>& path) { return at(t, path).stats[kI].sum; }
double excl(const ViewTree& t, const std::vector<std::string>& path) { return at(t, path).stats[kE].sum; }

class Views : public ::testing::Test {
 protected:
  TempDir dir{"views"};

  std::filesystem::path database(const std::string& name, const std::string& json) {
    const auto spec = dir / (name + ".json");
    std::ofstream(spec) << json;
    return databaseFromSpec(name, spec);
  }

  std::filesystem::path databaseFromSpec(const std::string& name, const std::filesystem::path& spec) {
    const auto meas = dir / (name + "-meas");
    auto r = run(tool("csp-gen") + " -q --from-json " + spec.string() + " -o " + meas.string());
    EXPECT_EQ(r.status, 0) << r.output;
    const auto db = dir / name;
    r = run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return db;
  }

  static ViewTree view(const std::filesystem::path& db, ViewKind kind, ViewRequest request = {}) {
    request.kind = kind;
    if (request.thresholdPercent == 1.0) request.thresholdPercent = 0;  // golden tests see everything
    return buildView(*storage::Database::open(db), request);
  }

  static test::RunResult views(const std::string& args) { return run(tool("csp-views") + " " + args); }
};

// --- specs ----------------------------------------------------------------------------------

// f -> f -> f: samples 1, 2, 4 in the three frames, 8 in main.
const char* kSelfRecursion = R"({
  "executable": "rec", "metrics": [{"name": "time", "unit": "ns", "kind": "sampled", "period": 1}],
  "threads": [{"id": {"rank": 0, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"stmt": "main.c:2"}], "counts": {"time": 8}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "f", "file": "f.c", "line": 1}, {"stmt": "f.c:2"}], "counts": {"time": 1}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "f", "file": "f.c", "line": 1}, {"callsite": "f.c:3"},
              {"proc": "f", "file": "f.c", "line": 1}, {"stmt": "f.c:2"}], "counts": {"time": 2}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "f", "file": "f.c", "line": 1}, {"callsite": "f.c:3"},
              {"proc": "f", "file": "f.c", "line": 1}, {"callsite": "f.c:3"},
              {"proc": "f", "file": "f.c", "line": 1}, {"stmt": "f.c:2"}], "counts": {"time": 4}}
  ]}]})";

// f -> g -> f: 1 in the outer f, 2 in g, 4 in the inner f.
const char* kMutualRecursion = R"({
  "executable": "mut", "metrics": [{"name": "time", "unit": "ns", "kind": "sampled", "period": 1}],
  "threads": [{"id": {"rank": 0, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "f", "file": "f.c", "line": 1}, {"stmt": "f.c:2"}], "counts": {"time": 1}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "f", "file": "f.c", "line": 1}, {"callsite": "f.c:3"},
              {"proc": "g", "file": "g.c", "line": 1}, {"stmt": "g.c:2"}], "counts": {"time": 2}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "f", "file": "f.c", "line": 1}, {"callsite": "f.c:3"},
              {"proc": "g", "file": "g.c", "line": 1}, {"callsite": "g.c:3"},
              {"proc": "f", "file": "f.c", "line": 1}, {"stmt": "f.c:2"}], "counts": {"time": 4}}
  ]}]})";

// p called from two call sites of main; two threads: thread 0 spends 10 at site 5 and 30 at
// site 6, thread 1 spends 20 at site 5 only.
const char* kTwoContexts = R"({
  "executable": "two", "metrics": [{"name": "time", "unit": "ns", "kind": "sampled", "period": 1}],
  "threads": [
   {"id": {"rank": 0, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "p", "file": "p.c", "line": 1}, {"stmt": "p.c:2"}], "counts": {"time": 10}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:6"},
              {"proc": "p", "file": "p.c", "line": 1}, {"stmt": "p.c:2"}], "counts": {"time": 30}}]},
   {"id": {"rank": 1, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "p", "file": "p.c", "line": 1}, {"stmt": "p.c:2"}], "counts": {"time": 20}}]}
  ]})";

// Four threads with 100 each in main; thread 0 also spends 30 in "hot"; every thread 5 in "cold".
const char* kImbalance = R"({
  "executable": "imb", "metrics": [{"name": "time", "unit": "ns", "kind": "sampled", "period": 1}],
  "threads": [
   {"id": {"rank": 0, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"stmt": "main.c:2"}], "counts": {"time": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:3"}, {"proc": "hot"}, {"stmt": "hot.c:1"}], "counts": {"time": 30}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:4"}, {"proc": "cold"}, {"stmt": "cold.c:1"}], "counts": {"time": 5}}]},
   {"id": {"rank": 1, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"stmt": "main.c:2"}], "counts": {"time": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:4"}, {"proc": "cold"}, {"stmt": "cold.c:1"}], "counts": {"time": 5}}]},
   {"id": {"rank": 2, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"stmt": "main.c:2"}], "counts": {"time": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:4"}, {"proc": "cold"}, {"stmt": "cold.c:1"}], "counts": {"time": 5}}]},
   {"id": {"rank": 3, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"stmt": "main.c:2"}], "counts": {"time": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:4"}, {"proc": "cold"}, {"stmt": "cold.c:1"}], "counts": {"time": 5}}]}
  ]})";

}  // namespace

// --- Calling Context ------------------------------------------------------------------------

TEST_F(Views, Figure75CallingContextTable) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json");
  const auto t = view(db, ViewKind::CallingContext);
  // Thread 1 has exactly twice thread 0's values, so every sum is 3x the thesis' column.
  EXPECT_EQ(incl(t, {}), 333);
  EXPECT_EQ(excl(t, {"main"}), 33);
  EXPECT_EQ(incl(t, {"main"}), 333);
  EXPECT_EQ(excl(t, {"main", "loop main.c:10"}), 0);
  EXPECT_EQ(incl(t, {"main", "loop main.c:10"}), 333);
  EXPECT_EQ(excl(t, {"main", "loop main.c:10", "loop main.c:11"}), 3);
  EXPECT_EQ(incl(t, {"main", "loop main.c:10", "loop main.c:11"}), 333);
  EXPECT_EQ(excl(t, {"main", "loop main.c:10", "loop main.c:11", "main.c:12"}), 3);
  EXPECT_EQ(excl(t, {"main", "loop main.c:10", "loop main.c:11", "loop main.c:13"}), 30);
  EXPECT_EQ(incl(t, {"main", "loop main.c:10", "loop main.c:11", "loop main.c:13"}), 330);
  EXPECT_EQ(incl(t, {"main", "loop main.c:10", "loop main.c:11", "loop main.c:13", "main.c:14"}), 15);
  EXPECT_EQ(excl(t, {"main", "loop main.c:10", "loop main.c:11", "loop main.c:13", "call main.c:16"}), 0);
  EXPECT_EQ(incl(t, {"main", "loop main.c:10", "loop main.c:11", "loop main.c:13", "call main.c:16"}), 300);
  // Statistics across the two threads: main inclusive {111, 222}.
  const auto& main = at(t, {"main"});
  EXPECT_DOUBLE_EQ(main.stats[kI].mean, 166.5);
  EXPECT_DOUBLE_EQ(main.stats[kI].stddev, 55.5);
  EXPECT_DOUBLE_EQ(main.stats[kI].max, 222);
  EXPECT_EQ(main.stats[kI].argmax, 1u);
  EXPECT_DOUBLE_EQ(t.percent(main, kE), 100.0 * 33 / 333);
}

TEST_F(Views, Figure75FlatView) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json");
  const auto t = view(db, ViewKind::Flat);
  EXPECT_EQ(incl(t, {"fig75", "main.c", "main"}), 333);
  EXPECT_EQ(excl(t, {"fig75", "main.c", "main"}), 33);
  EXPECT_EQ(excl(t, {"fig75", "main.c", "main", "loop main.c:10", "loop main.c:11", "loop main.c:13"}), 30);
  EXPECT_EQ(
      incl(t, {"fig75", "main.c", "main", "loop main.c:10", "loop main.c:11", "loop main.c:13", "call main.c:16"}),
      300);
  EXPECT_EQ(incl(t, {"fig75", "work.c", "work"}), 300);
  EXPECT_EQ(excl(t, {"fig75", "work.c", "work"}), 300);
  // Module and file levels count each sample once: work is called from main in the same module.
  EXPECT_EQ(incl(t, {"fig75"}), 333);
  EXPECT_EQ(excl(t, {"fig75"}), 333);
  EXPECT_EQ(incl(t, {"fig75", "main.c"}), 333);
}

// --- recursion ------------------------------------------------------------------------------

TEST_F(Views, SelfRecursionCountsEachSampleOnce) {
  const auto db = database("rec", kSelfRecursion);
  const auto flat = view(db, ViewKind::Flat);
  EXPECT_EQ(excl(flat, {"rec", "f.c", "f"}), 7);
  EXPECT_EQ(incl(flat, {"rec", "f.c", "f"}), 7);
  EXPECT_EQ(incl(flat, {"rec", "f.c", "f", "f.c:2"}), 7);
  EXPECT_EQ(incl(flat, {"rec", "f.c", "f", "call f.c:3"}), 6);  // from the outermost f only
  EXPECT_EQ(at(flat, {"rec", "f.c", "f"}).instances[kE], 3u);
  EXPECT_EQ(at(flat, {"rec", "f.c", "f"}).instances[kI], 1u);
  EXPECT_EQ(incl(flat, {"rec"}), 15);
  EXPECT_EQ(excl(flat, {"rec"}), 15);

  const auto callers = view(db, ViewKind::Callers, [] {
    ViewRequest r;
    r.depth = 5;
    return r;
  }());
  EXPECT_EQ(excl(callers, {"f"}), 7);
  EXPECT_EQ(incl(callers, {"f"}), 7);
  EXPECT_EQ(excl(callers, {"f", "main@main.c:5"}), 1);
  EXPECT_EQ(incl(callers, {"f", "main@main.c:5"}), 7);
  EXPECT_EQ(excl(callers, {"f", "f@f.c:3"}), 6);
  EXPECT_EQ(incl(callers, {"f", "f@f.c:3"}), 6);  // f3's chain f->f recurs above it
  EXPECT_EQ(excl(callers, {"f", "f@f.c:3", "f@f.c:3"}), 4);
  EXPECT_EQ(incl(callers, {"f", "f@f.c:3", "f@f.c:3"}), 4);
  EXPECT_EQ(incl(callers, {"f", "f@f.c:3", "main@main.c:5"}), 6);
  EXPECT_EQ(incl(callers, {"main"}), 15);
  EXPECT_EQ(excl(callers, {"main"}), 8);
}

TEST_F(Views, MutualRecursionCountsEachSampleOnce) {
  const auto db = database("mut", kMutualRecursion);
  const auto flat = view(db, ViewKind::Flat);
  EXPECT_EQ(excl(flat, {"mut", "f.c", "f"}), 5);
  EXPECT_EQ(incl(flat, {"mut", "f.c", "f"}), 7);
  EXPECT_EQ(incl(flat, {"mut", "f.c", "f", "f.c:2"}), 5);
  EXPECT_EQ(incl(flat, {"mut", "f.c", "f", "call f.c:3"}), 6);
  EXPECT_EQ(excl(flat, {"mut", "g.c", "g"}), 2);
  EXPECT_EQ(incl(flat, {"mut", "g.c", "g"}), 6);

  ViewRequest r;
  r.depth = 5;
  const auto callers = view(db, ViewKind::Callers, r);
  EXPECT_EQ(excl(callers, {"f"}), 5);
  EXPECT_EQ(incl(callers, {"f"}), 7);
  EXPECT_EQ(incl(callers, {"f", "g@g.c:3"}), 4);
  EXPECT_EQ(incl(callers, {"f", "g@g.c:3", "f@f.c:3"}), 4);
  EXPECT_EQ(incl(callers, {"f", "main@main.c:5"}), 7);
  EXPECT_EQ(incl(callers, {"g"}), 6);
  EXPECT_EQ(incl(callers, {"g", "f@f.c:3"}), 6);
  EXPECT_EQ(incl(callers, {"g", "f@f.c:3", "main@main.c:5"}), 6);
}

// --- instance counting (Fig. 7.7) and distinct call sites ----------------------------------------

TEST_F(Views, FlatAndCallersStatisticsCountInstances) {
  const auto db = database("two", kTwoContexts);
  for (auto kind : {ViewKind::Flat, ViewKind::Callers}) {
    const auto t = view(db, kind);
    const auto& p = kind == ViewKind::Flat ? at(t, {"two", "p.c", "p"}) : at(t, {"p"});
    // Two instances x two threads = 4 inputs {10, 20, 30, 0}.
    EXPECT_EQ(p.instances[kI], 2u);
    EXPECT_EQ(p.stats[kI].inputs, 4u);
    EXPECT_DOUBLE_EQ(p.stats[kI].sum, 60);
    EXPECT_DOUBLE_EQ(p.stats[kI].mean, 15);
    EXPECT_DOUBLE_EQ(p.stats[kI].stddev, std::sqrt(125.0));
    EXPECT_DOUBLE_EQ(p.stats[kI].max, 30);
    EXPECT_DOUBLE_EQ(p.stats[kI].min, 0);
  }
  ViewRequest present;
  present.population = metrics::Population::Present;
  const auto flat = view(db, ViewKind::Flat, present);
  EXPECT_DOUBLE_EQ(at(flat, {"two", "p.c", "p"}).stats[kI].mean, 20);
  EXPECT_NEAR(at(flat, {"two", "p.c", "p"}).stats[kI].stddev, std::sqrt(200.0 / 3), 1e-12);
}

TEST_F(Views, FormulaColumnsOverFinalizedStatistics) {
  // Two threads: cycles 600/200 and instructions 200/100 at main's only statement. Per node,
  // cpi = cycles.sum / instructions.sum = 800 / 300 (a ratio of sums, not a mean of ratios 3 and 2),
  // spread = cycles.max - cycles.min = 400.
  const auto db = database(
      "cpi", R"({"metrics": [{"name": "cycles", "kind": "counted"}, {"name": "instructions", "kind": "counted"}],
    "threads": [
      {"id": {"rank": 0}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"cycles": 600, "instructions": 200}}]},
      {"id": {"rank": 1}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"cycles": 200, "instructions": 100}}]}]})");
  ViewRequest r;
  r.columns = {{"cycles", Statistic::Sum, storage::MetricScope::Inclusive},
               {"", Statistic::Sum, storage::MetricScope::Inclusive, "cpi = cycles.sum / instructions.sum"},
               {"", Statistic::Sum, storage::MetricScope::Inclusive, "spread = cycles.max - cycles.min"}};
  const auto t = view(db, ViewKind::CallingContext, r);
  const auto& main = at(t, {"main"});
  EXPECT_DOUBLE_EQ(main.values[1], 800.0 / 300.0);
  EXPECT_DOUBLE_EQ(main.values[2], 400.0);
  EXPECT_EQ(t.columns[1].metric, "cpi");
  EXPECT_TRUE(std::isnan(t.percent(main, 1)));
  // From the command line, sorted by the formula, in every format.
  const auto out =
      run(tool("csp-views") + " --flat --formula 'cpi = cycles.sum / instructions.sum' --sort cpi:I --format csv " +
          db.string());
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_NE(out.output.find("cpi:I"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("2.666666"), std::string::npos) << out.output;
  const auto bad = run(tool("csp-views") + " --formula 'x = nope.sum' " + db.string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("unknown metric 'nope'"), std::string::npos) << bad.output;
}

TEST_F(Views, ExportsConserveTheRootTotalWhenTopLevelContextsArePruned) {
  // main holds 1000; forty tiny top-level procedures hold 5 each (0.2 % each: pruned at the
  // default 1 % threshold), the root's total is 1200.
  std::string samples = R"({"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"time": 1000}})";
  for (int i = 0; i < 40; ++i)
    samples +=
        R"(, {"path": [{"proc": "tiny)" + std::to_string(i) + R"("}, {"stmt": "t.c:1"}], "counts": {"time": 5}})";
  const auto db = database("pruned", R"({"metrics": [{"name": "time", "unit": "ns", "kind": "sampled", "period": 1}],
    "threads": [{"id": {"rank": 0}, "samples": [)" +
                                         samples + "]}]}");
  const auto folded = run(tool("csp-views") + " --format folded " + db.string());
  ASSERT_EQ(folded.status, 0) << folded.output;
  long long total = 0;
  std::istringstream lines(folded.output);
  for (std::string line; std::getline(lines, line);) total += std::stoll(line.substr(line.rfind(' ') + 1));
  EXPECT_EQ(total, 1200) << folded.output;
  EXPECT_NE(folded.output.find("[other] 200"), std::string::npos) << folded.output;
  const auto speedscope = run(tool("csp-views") + " --format speedscope " + db.string());
  ASSERT_EQ(speedscope.status, 0) << speedscope.output;
  const auto j = nlohmann::json::parse(speedscope.output);
  double weights = 0;
  for (const auto& w : j["profiles"][0]["weights"]) weights += w.get<double>();
  EXPECT_EQ(weights, 1200.0);
}

TEST_F(Views, ExportsKeepNamesThatAreNotUtf8) {
  // Procedure and file names come from binaries: any bytes.
  storage::ProfileBuilder b(FrameKind::Symbolic);
  b.profile().identity.idTuple = {{IdKind::Rank, 0}};
  b.addMetric({"time", "ns", MetricKind::Sampled, 1, ""});
  const auto proc = b.frame(SymbolicFrame{ScopeKind::ProcFrame,
                                          b.intern("bad\xff\xfe"
                                                   "name"),
                                          b.intern("f\xc3.c"), 1, b.intern("m")});
  const auto stmt = b.frame(SymbolicFrame{ScopeKind::Stmt, 0, b.intern("f\xc3.c"), 2, 0});
  std::uint32_t path[] = {proc, stmt};
  b.addCount(b.path(path), 0, 10);
  const auto meas = dir / "latin1-meas";
  std::filesystem::create_directories(meas);
  storage::writeProfile(b.finish(), meas / "r000000.cspprof");
  const auto db = dir / "latin1";
  ASSERT_EQ(run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string()).status, 0);
  for (const std::string format : {"json", "speedscope"}) {
    const auto r = run(tool("csp-views") + " --format " + format + " " + db.string());
    ASSERT_EQ(r.status, 0) << format << ": " << r.output;
    EXPECT_TRUE(nlohmann::json::accept(r.output)) << format;
    EXPECT_NE(r.output.find("bad\xef\xbf\xbd\xef\xbf\xbdname"), std::string::npos) << format << ": " << r.output;
  }
  for (const std::string options : {"--info --format json", "--node 1 --format json"}) {
    const auto r = run(tool("csp-views") + " " + options + " " + db.string());
    EXPECT_EQ(r.status, 0) << options << ": " << r.output;
  }
}

TEST_F(Views, CalleeFromTwoCallSitesShowsTwoEntries) {
  const auto db = database("two", kTwoContexts);
  const auto t = view(db, ViewKind::Callers);
  const auto& p = at(t, {"p"});
  ASSERT_EQ(p.children.size(), 2u);
  const auto& site5 = at(t, {"p", "main@main.c:5"});
  const auto& site6 = at(t, {"p", "main@main.c:6"});
  EXPECT_DOUBLE_EQ(site5.stats[kI].sum, 30);
  EXPECT_DOUBLE_EQ(site5.stats[kI].mean, 15);
  EXPECT_DOUBLE_EQ(site5.stats[kI].stddev, 5);
  EXPECT_DOUBLE_EQ(site6.stats[kI].sum, 30);
  EXPECT_DOUBLE_EQ(site6.stats[kI].mean, 15);
  EXPECT_DOUBLE_EQ(site6.stats[kI].stddev, 15);
  EXPECT_EQ(site6.stats[kI].argmax, 0u);
}

// --- navigation ---------------------------------------------------------------------------------

TEST_F(Views, ThresholdKeepsImbalancedNodes) {
  const auto db = database("imb", kImbalance);
  ViewRequest r;
  r.kind = ViewKind::CallingContext;
  r.thresholdPercent = 10;
  const auto t = buildView(*storage::Database::open(db), r);
  // hot: 30 of 420 (7 %) but one thread spends 30 of an average thread's 105 (29 %).
  const auto& hot = at(t, {"main", "call main.c:3"});
  EXPECT_TRUE(hot.imbalanceOnly);
  bool coldShown = false;
  for (const auto& n : t.nodes) coldShown |= n.name == "cold" || (n.kind == NodeKind::CallSite && n.line == 4);
  EXPECT_FALSE(coldShown);  // 20 of 420 and 5 per thread: below 10 % either way
  EXPECT_GE(t.pruned.belowThreshold, 1u);
  EXPECT_GE(t.pruned.keptForImbalance, 1u);
}

TEST_F(Views, DepthFocusHideKeepHotPathTop) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json");
  auto open = [&] { return storage::Database::open(db); };
  ViewRequest r;
  r.thresholdPercent = 0;
  r.depth = 1;
  auto t = buildView(*open(), r);
  EXPECT_EQ(t.nodes.size(), 2u);  // root and main
  EXPECT_TRUE(t.nodes[1].truncated);
  EXPECT_EQ(t.pruned.beyondDepth, 1u);

  r = {};
  r.focus = "work";
  t = buildView(*open(), r);
  ASSERT_EQ(t.roots.size(), 1u);
  EXPECT_EQ(t.nodes[t.roots[0]].name, "work");
  EXPECT_NEAR(t.percent(t.nodes[t.roots[0]], 0), 100.0 * 300 / 333, 1e-9);

  // An exact name wins over substring matches: "main" is the procedure, not the file main.c.
  r = {};
  r.kind = ViewKind::Flat;
  r.focus = "main";
  t = buildView(*open(), r);
  ASSERT_EQ(t.roots.size(), 1u);
  EXPECT_EQ(t.nodes[t.roots[0]].kind, NodeKind::Procedure);

  r = {};
  r.hide = {"work"};
  t = buildView(*open(), r);
  for (const auto& n : t.nodes) EXPECT_NE(n.name, "work");
  EXPECT_EQ(t.pruned.hidden, 1u);

  r = {};
  r.thresholdPercent = 0;
  r.keep = {"work"};
  t = buildView(*open(), r);
  // Paths to work and work's own subtree: main's statements are gone.
  for (const auto& n : t.nodes) {
    if (n.kind == NodeKind::Statement) {
      EXPECT_EQ(n.file, "work.c") << n.file << ":" << n.line << " is not on a path to work";
    }
  }
  EXPECT_EQ(t.nodes[t.nodes.back().parent].name, "work");
  EXPECT_EQ(t.nodes.size(), 8u);  // root main loop loop loop call work work.c:3

  r = {};
  r.hotPathPercent = 50;
  t = buildView(*open(), r);
  // root -> main -> loop 10 -> loop 11 -> loop 13 (330 of 333) -> call 16 (300 of 330) -> work -> work.c:3
  EXPECT_EQ(t.nodes.size(), 8u);
  EXPECT_EQ(t.nodes.back().kind, NodeKind::Statement);

  r = {};
  r.kind = ViewKind::Flat;
  r.top = 1;
  t = buildView(*open(), r);
  ASSERT_EQ(t.nodes[0].children.size(), 1u);
  EXPECT_EQ(t.nodes[t.nodes[0].children[0]].name, "main");
  EXPECT_EQ(t.pruned.beyondTop, 1u);

  r = {};
  r.top = 3;
  EXPECT_THROW(buildView(*open(), r), ViewError);  // --top is for flat and callers
}

TEST_F(Views, CallersAreBuiltOnlyAsDeepAsShown) {
  const auto db = database("rec", kSelfRecursion);
  ViewRequest r;
  r.kind = ViewKind::Callers;
  r.thresholdPercent = 0;
  r.depth = 1;
  const auto t = buildView(*storage::Database::open(db), r);
  ASSERT_EQ(t.nodes[0].children.size(), 2u);  // main, f
  for (auto c : t.nodes[0].children) EXPECT_TRUE(t.nodes[c].children.empty());
  EXPECT_TRUE(at(t, {"f"}).truncated);
  EXPECT_FALSE(at(t, {"main"}).truncated);

  // A procedure's id is stable across runs: focusing it shows the same procedure.
  r.depth = 2;
  r.focus = std::to_string(at(t, {"f"}).viewId);
  const auto focused = buildView(*storage::Database::open(db), r);
  EXPECT_EQ(focused.nodes[focused.roots.at(0)].name, "f");
  EXPECT_EQ(focused.nodes[focused.roots.at(0)].children.size(), 2u);
}

TEST_F(Views, DrillDownShowsThreadsAndOutliers) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json");
  const auto handle = storage::Database::open(db);
  const auto node = resolveNode(*handle, "main/work");
  const auto d = drillDown(*handle, node, "work", I);
  ASSERT_EQ(d.values.size(), 2u);
  EXPECT_EQ(d.values[0].value, 200);
  EXPECT_EQ(d.values[0].who, "rank 1 thread 0");
  EXPECT_EQ(d.values[1].who, "rank 0 thread 0");
  EXPECT_DOUBLE_EQ(d.all.mean, 150);
  std::uint64_t binned = 0;
  for (const auto& b : d.histogram) binned += b.count;
  EXPECT_EQ(binned, 2u);
  EXPECT_EQ(resolveNode(*handle, "1"), 1u);
  EXPECT_THROW(resolveNode(*handle, "main/nosuch"), ViewError);
  EXPECT_THROW(resolveNode(*handle, "999999"), ViewError);
  EXPECT_THROW(drillDown(*handle, node, "nosuch", E), ViewError);
}

TEST(ShortenName, CollapsesTemplatesAndParameters) {
  EXPECT_EQ(shortenName("std::vector<int, std::allocator<int> >::push_back(int const&)", 80),
            "std::vector<...>::push_back(...)");
  EXPECT_EQ(shortenName("main", 80), "main");
  EXPECT_EQ(shortenName("f()", 80), "f()");
  EXPECT_EQ(shortenName("bool operator<(A const&, A const&)", 80), "bool operator<(...)");
  EXPECT_EQ(shortenName(std::string(100, 'x'), 20).size(), 20u);
}

// --- the command line ---------------------------------------------------------------------------

TEST_F(Views, CliEveryViewAndFormatRuns) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json").string();
  auto r = views(db);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("main"), std::string::npos);
  EXPECT_NE(r.output.find("main.c:1"), std::string::npos);
  EXPECT_NE(r.output.find("100.0%"), std::string::npos);
  EXPECT_EQ(r.output.find("\x1b["), std::string::npos);  // no colour into a pipe

  for (const char* view : {"", "--flat", "--callers", "--regions"})
    for (const char* format : {"text", "csv", "json"}) {
      r = views(std::string(view) + " --format " + format + " " + db);
      EXPECT_EQ(r.status, 0) << view << " " << format << ": " << r.output;
      if (std::string(format) == "json") {
        EXPECT_TRUE(nlohmann::json::accept(r.output)) << r.output;
      }
    }
  r = views("--flat -t 0 " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("module fig75"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("file main.c"), std::string::npos) << r.output;
  r = views("--callers -t 0 " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("300  90.1%      <- main  at main.c:16  #3"), std::string::npos) << r.output;
  r = views("-t 0 --depth 1 " + db);
  EXPECT_NE(r.output.find("pruned: 1 not expanded at the depth limit"), std::string::npos) << r.output;

  r = views("--format csv " + db);
  EXPECT_EQ(r.output.substr(0, 40), "id,parent,depth,kind,name,file,line,modu");

  r = views("--format folded " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("main;work 300\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("main 33\n"), std::string::npos) << r.output;

  r = views("--format speedscope " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto s = nlohmann::json::parse(r.output);
  EXPECT_EQ(s["profiles"][0]["type"], "sampled");
  EXPECT_EQ(s["profiles"][0]["endValue"], 333);

  r = views("--info " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("threads      2 profiles"), std::string::npos) << r.output;
  r = views("--info --format json " + db);
  EXPECT_EQ(r.status, 0) << r.output;

  r = views("--node main/work " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("max: rank 1 thread 0 = 200"), std::string::npos) << r.output;
  for (const char* format : {"csv", "json"})
    EXPECT_EQ(views(std::string("--node 1 --format ") + format + " " + db).status, 0);

  r = views("--flat --stat mean,max,imbalance,count --population present --sort max:E --color always " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\x1b["), std::string::npos);
  r = views("--callers --top 1 --depth 3 -t 0 " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("beyond --top"), std::string::npos) << r.output;
}

TEST_F(Views, CliSyntheticDatabaseEveryViewAndFormat) {
  const auto meas = dir / "syn-meas";
  auto r = run(tool("csp-gen") + " -q --ranks 4 --threads 2 --nodes 300 --metrics 2 --regions -o " + meas.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto db = (dir / "syn").string();
  r = run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* view : {"", "--flat", "--callers", "--regions"})
    for (const char* format : {"text", "csv", "json"}) {
      r = views(std::string(view) + " --format " + format + " " + db);
      EXPECT_EQ(r.status, 0) << view << " " << format << ": " << r.output;
    }
  for (const char* format : {"folded", "speedscope"}) {
    EXPECT_EQ(views(std::string("--format ") + format + " " + db).status, 0);
    EXPECT_EQ(views(std::string("--regions --format ") + format + " " + db).status, 0);
  }
  r = views("--hot-path " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  r = views("--node 3 " + db);
  EXPECT_EQ(r.status, 0) << r.output;
}

// Region metrics without inclusive values (visits; straggler-time and the other per-process
// concurrency metrics) are shown and sorted by their exclusive values, with shares of the total
// over all regions and no pruning by them (a parent's own visits say nothing about its children).
TEST_F(Views, RegionMetricsWithoutInclusiveValues) {
  const auto db = database("concurrency", R"({
    "metrics": [{"name": "cpu-time", "unit": "ns", "kind": "sampled", "period": 1000}],
    "threads": [
      {"id": {"rank": 0, "thread": 0}, "pid": 10,
       "samples": [{"path": [{"proc": "main", "file": "m.c", "line": 1}, {"stmt": "m.c:2"}], "counts": {"cpu-time": 5}}],
       "events": [{"t": 0, "enter": "solve"}, {"t": 100, "exit": "solve"}, {"t": 100, "enter": "io"}, {"t": 130, "exit": "io"}]},
      {"id": {"rank": 0, "thread": 1}, "pid": 10,
       "samples": [{"path": [{"proc": "main", "file": "m.c", "line": 1}, {"stmt": "m.c:2"}], "counts": {"cpu-time": 5}}],
       "events": [{"t": 0, "enter": "solve"}, {"t": 50, "exit": "solve"}, {"t": 100, "enter": "io"}, {"t": 110, "exit": "io"}]}]})");
  auto r = views("--regions --sort straggler-time --format csv " + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("straggler-time:sum:I"), std::string::npos) << "no column of zeros: " << r.output;
  const auto solve = r.output.find(",solve,"), io = r.output.find(",io,");
  ASSERT_NE(solve, std::string::npos) << r.output;
  ASSERT_NE(io, std::string::npos) << r.output;
  EXPECT_LT(solve, io) << "sorted by straggler time (50 before 20): " << r.output;
  // Visits: the top-level region's own 8 visits are below the 1 % threshold of the 1,608 visits,
  // and its children are still shown; every share is at most 100 %.
  const auto meas = dir / "visits-meas";
  r = run(tool("csp-gen") + " -q --ranks 2 --threads 4 --nodes 200 --regions -o " + meas.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto synthetic = (dir / "visits").string();
  r = run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + synthetic);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto tree = view(synthetic, ViewKind::Regions, [] {
    ViewRequest q;
    q.columns = {{"visits", Statistic::Sum, storage::MetricScope::Inclusive}};
    q.thresholdPercent = 1;
    return q;
  }());
  ASSERT_EQ(tree.columns.size(), 1u);
  EXPECT_EQ(tree.columns[0].scope, storage::MetricScope::Exclusive);
  EXPECT_EQ(tree.nodes.size(), 4u) << "root, main and its two children";
  for (const auto& n : tree.nodes) EXPECT_LE(tree.percent(n, 0), 100.0) << n.name;
}

// --imbalance and --hot-path take an optional value: "csp-views --imbalance DB --format json"
// failed with "DB is required" (the option took the database). --info counted the region
// tree's root as a region ("regions 1" without any).
TEST_F(Views, CliOptionalValuesLeaveTheDatabaseAndInfoCountsRegions) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json").string();
  auto r = views("--imbalance " + db + " --format json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::accept(r.output)) << r.output;
  r = views("--hot-path " + db + " --format csv");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("id,parent,", 0), 0u) << r.output;
  EXPECT_EQ(views("--imbalance main " + db).status, 0);
  r = views("--info " + db);
  EXPECT_NE(r.output.find("regions      0\n"), std::string::npos) << r.output;
  EXPECT_EQ(nlohmann::json::parse(views("--info --format json " + db).output)["regions"], 0);
  const auto withRegions = database("two-regions", R"({
    "metrics": [{"name": "cpu-time", "unit": "ns", "kind": "sampled", "period": 1}],
    "threads": [{"id": {"thread": 0},
       "samples": [{"path": [{"proc": "main", "file": "m.c", "line": 1}, {"stmt": "m.c:2"}], "counts": {"cpu-time": 5}}],
       "events": [{"t": 0, "enter": "solve"}, {"t": 5, "enter": "solve/halo"}, {"t": 9, "exit": "solve/halo"},
                  {"t": 10, "exit": "solve"}]}]})");
  r = views("--info " + withRegions.string());
  EXPECT_NE(r.output.find("regions      2\n"), std::string::npos) << r.output;
}

// Integer metrics print exactly in CSV and JSON: 2^55 + 1 ns came out as 3.602879701896397e+16.
TEST_F(Views, CliRegionExportsKeepIntegersExact) {
  const auto db = database("exact", R"({
    "metrics": [{"name": "cpu-time", "unit": "ns", "kind": "sampled", "period": 1}],
    "threads": [{"id": {"thread": 0},
       "samples": [{"path": [{"proc": "main", "file": "m.c", "line": 1}, {"stmt": "m.c:2"}], "counts": {"cpu-time": 5}}],
       "events": [{"t": 0, "enter": "long"}, {"t": 36028797018963969, "exit": "long"},
                  {"t": 36028797018963969, "enter": "peta"}, {"t": 36028797019963969, "exit": "peta"}]}]})");
  auto r = views("--regions -m time,any-time -s sum,max --scope exclusive -t 0 --format csv " + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(",long,,0,,36028797018963969,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(",peta,,0,,1000000,"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("e+"), std::string::npos) << r.output;
  r = views("--regions -m time -s sum,max --scope exclusive --format json " + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  bool seen = false;
  for (const auto& n : j["nodes"])
    if (n["name"] == "long") {
      seen = true;
      EXPECT_TRUE(n["values"]["time:sum:E"].is_number_integer()) << n.dump();
      EXPECT_EQ(n["values"]["time:sum:E"].get<std::uint64_t>(), 36028797018963969u) << n.dump();
      EXPECT_EQ(n["values"]["time:max:E"].get<std::uint64_t>(), 36028797018963969u) << n.dump();
    }
  EXPECT_TRUE(seen) << r.output;
}

TEST_F(Views, CliBadInputIsOneClearLine) {
  const auto db = databaseFromSpec("fig75", std::filesystem::path(CSP_TEST_DATA_DIR) / "fig75.json").string();
  std::filesystem::create_directories(dir / "notadb");
  // A real database whose table files are overwritten with garbage.
  std::filesystem::copy(db, dir / "damaged", std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::directory_iterator(dir / "damaged"))
    if (e.path().extension() == ".sst") std::ofstream(e.path(), std::ios::trunc) << std::string(4096, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {(dir / "missing").string(), "does not exist"},
      {(dir / "notadb").string(), "not a CSP database"},
      {(dir / "damaged").string(), "damaged database"},
      {"--metric nosuch " + db, "unknown metric 'nosuch'"},
      {"--node 12345 " + db, "no CCT node 12345"},
      {"--node main/nosuch " + db, "no procedure 'nosuch'"},
      {"--focus nosuch " + db, "no node of this name"},
      {"--flat --callers " + db, "excludes"},
      {"--top 3 " + db, "--top applies to the flat and callers views"},
      {"--flat --format folded " + db, "folded stacks"},
      {"--stat mediann " + db, "unknown statistic 'mediann'"},
      {"--sort nosuch " + db, "--sort nosuch"},
      {"--threshold 120 " + db, "--threshold"},
      {"", "DB is required"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = views(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.output.rfind("csp-views: ", 0), 0u) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << args;
  }
}
