// Work, idleness, overhead and effort from exact profiles (csp-gen --from-json -> csp-prof-mpi ->
// views): csp-prof-mpi's overhead rules (transparent modules, rule matching, --overhead-rule), the
// effort metric, and csp-views --effort with the thesis' Fig. 5.1 notes in all four quadrants.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/test_support.hpp"
#include "csp/storage/database.hpp"
#include "csp/views/render.hpp"

using namespace csp;
using namespace csp::views;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

// One thread; work and idleness as csp-run --idleness would record them (counted, ns).
//   main.c:2                                 work 100
//   refine   (high idleness, no overhead)    work 100, idleness 300
//   coarsen  (own work 100, libomp 100)      work 200, overhead 100
//   change   (own 100 + idleness 200; libgomp -> libc futex 100)
//   memcpy   (libc, called from main)        work 50: the caller's, no overhead
//   lock     (libc pthread_mutex_lock)       work 20: overhead
const char* kSpec = R"({
  "executable": "app",
  "metrics": [{"name": "work", "unit": "ns", "kind": "counted", "period": 1},
              {"name": "idleness", "unit": "ns", "kind": "counted", "period": 1}],
  "threads": [{"id": {"rank": 0, "thread": 0}, "samples": [
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"stmt": "main.c:2"}], "counts": {"work": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:3"},
              {"proc": "refine", "file": "r.c", "line": 1}, {"stmt": "r.c:2"}], "counts": {"work": 100, "idleness": 300}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:4"},
              {"proc": "coarsen", "file": "c.c", "line": 1}, {"stmt": "c.c:2"}], "counts": {"work": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:4"},
              {"proc": "coarsen", "file": "c.c", "line": 1}, {"callsite": "c.c:3"},
              {"proc": "__kmp_barrier", "module": "/usr/lib/llvm-14/lib/libomp.so.5"}, {"stmt": "kmp.c:9"}],
     "counts": {"work": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "change", "file": "x.c", "line": 1}, {"stmt": "x.c:2"}], "counts": {"work": 100, "idleness": 200}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:5"},
              {"proc": "change", "file": "x.c", "line": 1}, {"callsite": "x.c:3"},
              {"proc": "GOMP_barrier", "module": "/usr/lib/x86_64-linux-gnu/libgomp.so.1"}, {"callsite": "gomp.c:4"},
              {"proc": "futex_wait", "module": "/usr/lib/x86_64-linux-gnu/libc.so.6"}, {"stmt": "futex.c:7"}],
     "counts": {"work": 100}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:6"},
              {"proc": "memcpy", "module": "/usr/lib/x86_64-linux-gnu/libc.so.6"}, {"stmt": "memcpy.S:1"}],
     "counts": {"work": 50}},
    {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:7"},
              {"proc": "pthread_mutex_lock", "module": "/usr/lib/x86_64-linux-gnu/libc.so.6"}, {"stmt": "lock.c:1"}],
     "counts": {"work": 20}}
  ]}]})";

class Effort : public ::testing::Test {
 protected:
  TempDir dir{"effort"};
  std::filesystem::path db(const std::string& name, const std::string& options = "") {
    const auto spec = dir / "spec.json";
    std::ofstream(spec) << kSpec;
    const auto meas = dir / "meas";
    if (!std::filesystem::exists(meas)) {
      auto r = run(tool("csp-gen") + " -q --from-json " + spec.string() + " -o " + meas.string());
      EXPECT_EQ(r.status, 0) << r.output;
    }
    const auto out = dir / name;
    auto r = run(tool("csp-prof-mpi") + " -q " + options + " " + meas.string() + " -o " + out.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return out;
  }

  // Inclusive sums of a metric per procedure name (each occurs once here).
  static std::map<std::string, double> byProcedure(const std::filesystem::path& path, const std::string& metric) {
    const auto database = storage::Database::open(path);
    ViewRequest request;
    request.thresholdPercent = 0;
    request.columns = {{metric, Statistic::Sum, storage::MetricScope::Inclusive}};
    const auto tree = buildView(*database, request);
    std::map<std::string, double> out;
    for (const auto& n : tree.nodes)
      if (n.kind == NodeKind::Procedure || n.kind == NodeKind::Root) out[n.name] = n.stats[0].sum;
    return out;
  }
};

}  // namespace

TEST(EffortNote, FigureFiveOneQuadrants) {
  EXPECT_EQ(effortNote(100, 0, 0, 20, 20), "effectively parallel");
  EXPECT_EQ(effortNote(100, 300, 0, 20, 20), "refine granularity");
  EXPECT_EQ(effortNote(200, 0, 100, 20, 20), "coarsen granularity");
  EXPECT_EQ(effortNote(200, 200, 100, 20, 20), "change the parallelization");
  EXPECT_EQ(effortNote(0, 0, 0, 20, 20), "");  // no effort: no reading
  // Thresholds are inclusive: exactly 20 % is high.
  EXPECT_EQ(effortNote(80, 20, 0, 20, 20), "refine granularity");
  EXPECT_EQ(effortNote(100, 0, 20, 20, 20), "coarsen granularity");
  EXPECT_EQ(effortNote(100, 0, 19, 20, 20), "effectively parallel");
}

TEST_F(Effort, OverheadRulesAndEffort) {
  const auto path = db("db");
  const auto database = storage::Database::open(path);
  std::vector<std::string> names;
  for (const auto& m : database->metrics()) names.push_back(m.descriptor.name);
  EXPECT_EQ(names, (std::vector<std::string>{"work", "idleness", "overhead", "effort"}));
  const auto overhead = byProcedure(path, "overhead");
  EXPECT_EQ(overhead.at("__kmp_barrier"), 100);  // libomp.so*
  EXPECT_EQ(overhead.at("GOMP_barrier"), 100);   // libgomp.so*: the futex wait in libc below it counts too
  EXPECT_EQ(overhead.at("futex_wait"), 100);
  EXPECT_EQ(overhead.at("memcpy"), 0);               // libc is looked through: main's work
  EXPECT_EQ(overhead.at("pthread_mutex_lock"), 20);  // libc.so*:pthread_*
  EXPECT_EQ(overhead.at("<program root>"), 220);
  const auto effort = byProcedure(path, "effort");
  EXPECT_EQ(effort.at("<program root>"), 670 + 500);  // work 670 + idleness 500
  EXPECT_EQ(effort.at("refine"), 400);

  // --overhead-rule replaces the defaults: only libomp now; 'default' brings them back.
  EXPECT_EQ(byProcedure(db("db-omp", "--overhead-rule 'libomp.so*'"), "overhead").at("<program root>"), 100);
  EXPECT_EQ(byProcedure(db("db-plus", "--overhead-rule default --overhead-rule 'app:memcpy'"), "overhead")
                .at("<program root>"),
            220);  // memcpy's module is libc, not app: the extra rule matches nothing
  EXPECT_EQ(byProcedure(db("db-libc", "--overhead-rule 'libc.so*:memcpy'"), "overhead").at("<program root>"), 50);
  const auto none = storage::Database::open(db("db-none", "--overhead-rule none"));
  EXPECT_EQ(byProcedure(dir / "db-none", "overhead").at("<program root>"), 0);
  EXPECT_NE(none->metrics()[2].descriptor.description.find("rules: none"), std::string::npos);
}

TEST_F(Effort, ViewsShowFigureFiveOne) {
  const auto path = db("db");
  auto notes = [&](const std::string& format) {
    const auto r = run(tool("csp-views") + " --effort -t 0 --format " + format + " " + path.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return r.output;
  };
  const auto j = nlohmann::json::parse(notes("json"));
  std::map<std::string, std::string> note;
  for (const auto& n : j["nodes"])
    if (n["kind"] == "procedure")
      note[n["name"].get<std::string>()] = n["note"].is_null() ? "" : n["note"].get<std::string>();
  EXPECT_EQ(note.at("refine"), "refine granularity");
  EXPECT_EQ(note.at("coarsen"), "coarsen granularity");
  EXPECT_EQ(note.at("change"), "change the parallelization");
  EXPECT_EQ(note.at("memcpy"), "effectively parallel");
  std::vector<std::string> titles;
  for (const auto& c : j["columns"]) titles.push_back(c["title"]);
  EXPECT_EQ(titles, (std::vector<std::string>{"effort:sum:I", "work:sum:I", "idleness:sum:I", "overhead:sum:I",
                                              "idleness_pct:I", "overhead_pct:I"}));
  const auto csv = notes("csv");
  EXPECT_NE(csv.find(",note\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",refine granularity\n"), std::string::npos) << csv;
  const auto text = notes("text");
  EXPECT_NE(text.find("[change the parallelization]"), std::string::npos) << text;
  // Thresholds: with idleness high only from 60 %, change (50 %) becomes "coarsen granularity".
  const auto r = run(tool("csp-views") + " --effort --effort-thresholds 60,20 -t 0 --format json " + path.string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const auto& n : nlohmann::json::parse(r.output)["nodes"])
    if (n["name"] == "change") {
      EXPECT_EQ(n["note"], "coarsen granularity");
    }
  // Without the metrics: one clear line.
  const auto fig = std::string(CSP_TEST_DATA_DIR) + "/fig75.json";
  auto g = run(tool("csp-gen") + " -q --from-json " + fig + " -o " + (dir / "fig-meas").string());
  ASSERT_EQ(g.status, 0) << g.output;
  g = run(tool("csp-prof-mpi") + " -q " + (dir / "fig-meas").string() + " -o " + (dir / "fig").string());
  ASSERT_EQ(g.status, 0) << g.output;
  const auto bad = run(tool("csp-views") + " --effort " + (dir / "fig").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("--effort needs the metrics work and idleness"), std::string::npos) << bad.output;
  const auto badThresholds = run(tool("csp-views") + " --effort --effort-thresholds 5 " + path.string());
  EXPECT_EQ(badThresholds.status, 1);
  EXPECT_NE(badThresholds.output.find("expected IDLE,OVERHEAD"), std::string::npos) << badThresholds.output;
}
