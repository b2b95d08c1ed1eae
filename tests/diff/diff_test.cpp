// csp-diff: exact profiles at two scales (csp-gen --from-json), real csp-prof-mpi databases, and
// losses checked against hand-computed values (docs/diff.md).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/analysis/diff.hpp"
#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/views/answers.hpp"

using namespace csp;
using analysis::Presence;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

// One calling context of the test program and its cost per rank in the smaller (p) and the
// larger (q) run. @MPI@ is the MPI library's path, which differs between the runs (another
// install prefix) so that matching must go by the module's base name.
struct Context {
  std::string path;
  std::uint64_t perRankP = 0;
  std::uint64_t perRankQ = 0;
};

const std::string kMain = R"({"proc": "main", "file": "main.c", "line": 1})";
std::string callTo(int line, const std::string& proc, const std::string& file, const std::string& stmt,
                   const std::string& module = "") {
  return kMain + R"(, {"callsite": "main.c:)" + std::to_string(line) + R"("}, {"proc": ")" + proc + R"(", "file": ")" +
         file + R"(", "line": 1)" + (module.empty() ? "" : R"(, "module": ")" + module + "\"") + R"(}, {"stmt": ")" +
         stmt + "\"}";
}

// Strong scaling, 2 -> 4 ranks (Σ = ranks x per-rank cost):
//   compute       400 -> 200 per rank  Σ 800 -> 800    scales perfectly, excess 0
//   MPI_Allreduce  20 ->  40           Σ  40 -> 160    grows with the process count, +120
//   redistribute    - ->  15           Σ   0 ->  60    only in the larger run, +60
//   solve         300 -> 100           Σ 600 -> 400    superlinear gain, -200
//   main.c:50      50 ->  50           Σ 100 -> 200    replicated serial loop, +100
//   legacy          5 ->   -           Σ  10 ->   0    only in the smaller run, -10
//   root                               Σ 1550 -> 1620  excess 70: loss 100*70/1620 = 4.32 %
// MPI_Allreduce loses 100*120/1620 = 7.4 % of the run, and 100*120/70 = 171 % of the total loss.
const std::vector<Context> kStrong = {
    {callTo(10, "compute", "compute.c", "compute.c:3"), 400, 200},
    {callTo(20, "MPI_Allreduce", "allreduce.c", "allreduce.c:1", "@MPI@"), 20, 40},
    {callTo(30, "redistribute", "r.c", "r.c:2"), 0, 15},
    {callTo(40, "solve", "solve.c", "solve.c:7"), 300, 100},
    {kMain + R"(, {"stmt": "main.c:50"})", 50, 50},
    {callTo(60, "legacy", "legacy.c", "legacy.c:4"), 5, 0},
};

// Weak scaling, 2 -> 4 ranks (ideal: equal cost per rank; excess = Σq/4 - Σp/2 = per-rank change):
//   compute 400 -> 400 (0), MPI_Allreduce 20 -> 40 (+20), redistribute - -> 15 (+15),
//   solve 300 -> 260 (-40), main.c:50 10 -> 20 (+10); root 730 -> 735 per rank, excess 5:
//   loss 100*5/735 = 0.68 %; MPI_Allreduce loss 100*20/735 = 2.7 %, share 100*20/5 = 400 %.
const std::vector<Context> kWeak = {
    {callTo(10, "compute", "compute.c", "compute.c:3"), 400, 400},
    {callTo(20, "MPI_Allreduce", "allreduce.c", "allreduce.c:1", "@MPI@"), 20, 40},
    {callTo(30, "redistribute", "r.c", "r.c:2"), 0, 15},
    {callTo(40, "solve", "solve.c", "solve.c:7"), 300, 260},
    {kMain + R"(, {"stmt": "main.c:50"})", 10, 20},
};

std::string replaceAll(std::string s, const std::string& from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// A csp-gen spec of one run: `ranks` ranks (one thread each), every context with its per-rank
// count of the larger or smaller run.
std::string runSpec(const std::vector<Context>& contexts, int ranks, bool larger,
                    const std::string& metric = R"({"name": "cpu-time", "unit": "units", "period": 1})") {
  std::string threads;
  for (int r = 0; r < ranks; ++r) {
    std::string samples;
    for (const auto& c : contexts) {
      const auto count = larger ? c.perRankQ : c.perRankP;
      if (count == 0) continue;
      const std::string path = replaceAll(c.path, "@MPI@", larger ? "/opt/mpi-b/lib/libmpi.so" : "/usr/lib/libmpi.so");
      samples += (samples.empty() ? "" : ", ") + std::string(R"({"path": [)") + path + R"(], "counts": {")" +
                 (metric.find("\"t\"") != std::string::npos ? "t" : "cpu-time") + R"(": )" + std::to_string(count) +
                 "}}";
    }
    threads += (r ? ", " : "") + std::string(R"({"id": {"rank": )") + std::to_string(r) +
               R"(, "thread": 0}, "samples": [)" + samples + "]}";
  }
  return R"({"executable": "app", "metrics": [)" + metric + R"(], "threads": [)" + threads + "]}";
}

analysis::DiffOptions options(metrics::ScalingMode mode, std::optional<double> p = {}, std::optional<double> q = {}) {
  analysis::DiffOptions o;
  o.mode = mode;
  o.p = p;
  o.q = q;
  return o;
}
constexpr auto kStrongMode = metrics::ScalingMode::Strong;
constexpr auto kWeakMode = metrics::ScalingMode::Weak;

constexpr auto E = storage::MetricScope::Exclusive;
constexpr auto I = storage::MetricScope::Inclusive;

class Diff : public ::testing::Test {
 protected:
  TempDir dir{"diff"};

  // csp-gen + csp-prof-mpi: the database of one run.
  std::filesystem::path database(const std::string& name, const std::string& spec) {
    const auto json = dir / (name + ".json");
    std::ofstream(json) << spec;
    const auto meas = dir / (name + "-meas");
    auto r = run(tool("csp-gen") + " -q --from-json " + json.string() + " -o " + meas.string());
    EXPECT_EQ(r.status, 0) << r.output;
    const auto db = dir / name;
    r = run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return db;
  }

  std::pair<std::filesystem::path, std::filesystem::path> runs(const std::vector<Context>& contexts,
                                                               const std::string& tag) {
    return {database(tag + "-p2", runSpec(contexts, 2, false)), database(tag + "-p4", runSpec(contexts, 4, true))};
  }

  static analysis::ScalingDiff diff(const std::filesystem::path& p, const std::filesystem::path& q,
                                    const analysis::DiffOptions& options = {}) {
    const auto dbP = storage::Database::open(p);
    const auto dbQ = storage::Database::open(q);
    return analysis::computeScalingDiff(*dbP, *dbQ, options);
  }

  static std::map<std::string, storage::NodeId> labels(const analysis::ScalingDiff& d) {
    std::map<std::string, storage::NodeId> out;
    for (storage::NodeId i = 0; i < d.nodes.size(); ++i) out[views::contextLabel(d, i)] = i;
    return out;
  }

  std::string csp_diff(const std::string& args, int expectStatus) {
    auto r = run(tool("csp-diff") + " " + args);
    EXPECT_EQ(r.status, expectStatus) << r.output;
    return r.output;
  }

  // The scaling app measured by csp-run (`runOptions`) at 2 and 4 ranks, each reduced into
  // PREFIX-pN/db, replacing an earlier measurement. Call through ASSERT_NO_FATAL_FAILURE.
  void measureScalingApp(const std::string& prefix, const std::string& runOptions, const std::string& appArgs) {
    const std::string app = std::string(CSP_BINARY_DIR) + "/tests/diff/csp-diff-scaling-app";
    for (int ranks : {2, 4}) {
      const auto runDir = dir / (prefix + "-p" + std::to_string(ranks));
      std::filesystem::remove_all(runDir);
      auto r = run(csp::test::mpirun(ranks) + tool("csp-run") + runOptions + " -o " + (runDir / "meas").string() +
                   " -- " + app + " " + appArgs);
      ASSERT_EQ(r.status, 0) << r.output;
      r = run(tool("csp-prof-mpi") + " -q " + (runDir / "meas").string() + " -o " + (runDir / "db").string());
      ASSERT_EQ(r.status, 0) << r.output;
    }
  }

  // How the scaling app's growing work split between procedures: replicated_setup's inclusive
  // excess and its p run's sum, and the inclusive excess of `other` (a procedure that should not
  // grow).
  struct WorkSplit {
    double setup = 0, setupP = 0, other = 0;
    // The split holds: setup carries at least 0.6 of the p run's setup, `other` stays small beside it.
    bool holds() const { return setup > 0.6 * setupP && std::fabs(other) < 0.25 * setup; }
  };
  static WorkSplit workSplit(const analysis::ScalingDiff& d, const std::string& other) {
    WorkSplit w;
    for (const auto& n : d.nodes) {
      if (n.kind != ScopeKind::ProcFrame) continue;
      if (n.name == "replicated_setup") w.setup += n.inclusive.excess, w.setupP += n.inclusive.sumP;
      if (n.name == other) w.other += n.inclusive.excess;
    }
    return w;
  }
};

struct Expect {
  std::string label;
  double sumP, sumQ, excess;  // inclusive
  double excessE;             // exclusive
  Presence presence = Presence::Both;
};

void checkContexts(const analysis::ScalingDiff& d, const std::vector<Expect>& expected, double reference,
                   double totalExcess) {
  auto at = [&, index = std::map<std::string, storage::NodeId>()](const std::string& l) mutable {
    if (index.empty())
      for (storage::NodeId i = 0; i < d.nodes.size(); ++i) index[views::contextLabel(d, i)] = i;
    return index.count(l) ? index[l] : kNoIndex;
  };
  for (const auto& x : expected) {
    const auto id = at(x.label);
    ASSERT_NE(id, kNoIndex) << x.label;
    const auto& n = d.nodes[id];
    EXPECT_EQ(n.presence, x.presence) << x.label;
    EXPECT_DOUBLE_EQ(n.inclusive.sumP, x.sumP) << x.label;
    EXPECT_DOUBLE_EQ(n.inclusive.sumQ, x.sumQ) << x.label;
    EXPECT_DOUBLE_EQ(n.inclusive.excess, x.excess) << x.label;
    EXPECT_DOUBLE_EQ(n.inclusive.loss, 100.0 * x.excess / reference) << x.label;
    EXPECT_DOUBLE_EQ(n.inclusive.share, 100.0 * x.excess / totalExcess) << x.label;
    EXPECT_DOUBLE_EQ(n.exclusive.excess, x.excessE) << x.label;
    EXPECT_DOUBLE_EQ(n.exclusive.loss, 100.0 * x.excessE / reference) << x.label;
    EXPECT_FALSE(n.inclusive.withinNoise) << x.label << ": an exact metric has no sampling error";
  }
}

TEST_F(Diff, StrongScalingGolden) {
  const auto [p, q] = runs(kStrong, "strong");
  const auto d = diff(p, q);
  EXPECT_EQ(d.metric, "cpu-time");
  EXPECT_EQ(d.study.mode, metrics::ScalingMode::Strong);
  EXPECT_EQ(d.study.p, 2);
  EXPECT_EQ(d.study.q, 4);
  EXPECT_EQ(d.runP.processesFrom, "ranks");
  EXPECT_DOUBLE_EQ(d.study.rootSumQ, 1620);
  // 15 nodes in each run; redistribute's 3 only in q, legacy's 3 only in p.
  EXPECT_EQ(d.nodes.size(), 18u);
  EXPECT_EQ(d.onlyQ, 3u);
  EXPECT_EQ(d.onlyP, 3u);
  const std::string ar = "main > main.c:20 > MPI_Allreduce";
  checkContexts(d,
                {
                    {"<program root>", 1550, 1620, 70, 0},
                    {"main", 1550, 1620, 70, 100},
                    {"main > main.c:10 > compute", 800, 800, 0, 0},
                    {"main > main.c:10 > compute > compute.c:3", 800, 800, 0, 0},
                    {ar, 40, 160, 120, 120},  // matched despite another libmpi.so directory
                    {ar + " > allreduce.c:1", 40, 160, 120, 120},
                    {"main > main.c:20", 40, 160, 120, 0},
                    {"main > main.c:30", 0, 60, 60, 0, Presence::OnlyQ},
                    {"main > main.c:30 > redistribute", 0, 60, 60, 60, Presence::OnlyQ},
                    {"main > main.c:30 > redistribute > r.c:2", 0, 60, 60, 60, Presence::OnlyQ},
                    {"main > main.c:40 > solve", 600, 400, -200, -200},
                    {"main > main.c:50", 100, 200, 100, 100},
                    {"main > main.c:60 > legacy", 10, 0, -10, -10, Presence::OnlyP},
                },
                1620, 70);
  const auto& n = d.nodes[labels(d).at(ar)];
  EXPECT_NEAR(n.inclusive.loss, 7.407407, 1e-6);
  EXPECT_NEAR(n.inclusive.share, 171.428571, 1e-6);  // > 100 %: solve gained
  EXPECT_NEAR(d.total().loss, 4.320988, 1e-6);
  // The union is numbered in preorder: parents first.
  for (storage::NodeId i = 1; i < d.nodes.size(); ++i) EXPECT_LT(d.nodes[i].parent, i);
}

TEST_F(Diff, WeakScalingGolden) {
  const auto [p, q] = runs(kWeak, "weak");
  const auto d = diff(p, q, options(kWeakMode));
  EXPECT_DOUBLE_EQ(d.study.rootSumQ, 2940);
  const double perProcessQ = 2940.0 / 4;  // 735
  checkContexts(d,
                {
                    {"<program root>", 1460, 2940, 5, 0},
                    {"main", 1460, 2940, 5, 10},
                    {"main > main.c:10 > compute", 800, 1600, 0, 0},
                    {"main > main.c:20 > MPI_Allreduce", 40, 160, 20, 20},
                    {"main > main.c:30 > redistribute", 0, 60, 15, 15, Presence::OnlyQ},
                    {"main > main.c:40 > solve", 600, 1040, -40, -40},
                    {"main > main.c:50", 20, 80, 10, 10},
                },
                perProcessQ, 5);
  const auto& n = d.nodes[labels(d).at("main > main.c:20 > MPI_Allreduce")];
  EXPECT_NEAR(n.inclusive.loss, 2.721088, 1e-6);
  EXPECT_DOUBLE_EQ(n.inclusive.share, 400);
  EXPECT_NEAR(d.total().loss, 0.680272, 1e-6);
  EXPECT_EQ(d.onlyP, 0u);
}

TEST_F(Diff, OverriddenProcessCounts) {
  const auto [p, q] = runs(kWeak, "override");
  // Study the same runs as if they had 1 and 2 processes: excess = Σq/2 - Σp/1 = 1470 - 1460.
  const auto d = diff(p, q, options(kWeakMode, 1, 2));
  EXPECT_EQ(d.runP.processesFrom, "option");
  EXPECT_DOUBLE_EQ(d.total().excess, 10);
  EXPECT_DOUBLE_EQ(d.total().loss, 100.0 * 10 / 1470);
  // Only one side overridden: the other keeps its rank count, and p >= q is refused.
  EXPECT_THROW(diff(p, q, options(kStrongMode, 4)), analysis::DiffError);
  EXPECT_DOUBLE_EQ(diff(p, q, options(kWeakMode, std::nullopt, 8)).total().excess, 2940.0 / 8 - 730);
}

TEST_F(Diff, ProcessCountFromPidsWithoutRanks) {
  auto spec = [](int processes, std::uint64_t count) {
    std::string threads;
    for (int i = 0; i < processes; ++i)
      threads += (i ? ", " : "") + std::string(R"({"id": {"thread": )") + std::to_string(i) + R"(}, "pid": )" +
                 std::to_string(100 + i) +
                 R"(, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"t": )" +
                 std::to_string(count) + "}}]}";
    return R"({"metrics": [{"name": "t", "kind": "counted"}], "threads": [)" + threads + "]}";
  };
  const auto d = diff(database("pid-p", spec(2, 10)), database("pid-q", spec(3, 10)), options(kWeakMode));
  EXPECT_EQ(d.runP.processesFrom, "processes");
  EXPECT_EQ(d.study.p, 2);
  EXPECT_EQ(d.study.q, 3);
  EXPECT_EQ(d.metric, "t");  // no time metric: the first one in common
  EXPECT_DOUBLE_EQ(d.total().excess, 0);
  EXPECT_DOUBLE_EQ(d.total().loss, 0);
  EXPECT_TRUE(std::isnan(d.total().share));  // no total loss to share
}

// Sampled metric, period 1000: a profile's cost n*1000 is within 999 of the truth (Eq. A.10).
TEST_F(Diff, SamplingNoiseIsMarked) {
  const std::string metric = R"({"name": "t", "unit": "ns", "kind": "sampled", "period": 1000})";
  const std::vector<Context> contexts = {
      {kMain + R"(, {"stmt": "m.c:1"})", 3, 2},    // Σ 6000 -> 8000: +2000, bound 2*999 + 4*999 = 5994
      {kMain + R"(, {"stmt": "m.c:2"})", 10, 40},  // Σ 20000 -> 160000: +140000, far outside
  };
  const auto p = database("noise-p", runSpec(contexts, 2, false, metric));
  const auto q = database("noise-q", runSpec(contexts, 4, true, metric));
  const auto d = diff(p, q);
  const auto at = labels(d);
  const auto& small = d.nodes[at.at("main > m.c:1")];
  EXPECT_DOUBLE_EQ(small.inclusive.excess, 2000);
  EXPECT_DOUBLE_EQ(small.inclusive.noise, 5994);
  EXPECT_TRUE(small.inclusive.withinNoise);
  const auto& big = d.nodes[at.at("main > m.c:2")];
  EXPECT_DOUBLE_EQ(big.inclusive.noise, 5994);
  EXPECT_FALSE(big.inclusive.withinNoise);
  EXPECT_FALSE(d.total().withinNoise);
  // Weak: the bound scales like the excess, 2*999/2 + 4*999/4; excess 8000/4 - 6000/2 = -1000.
  const auto w = diff(p, q, options(kWeakMode));
  const auto& weakSmall = w.nodes[labels(w).at("main > m.c:1")].inclusive;
  EXPECT_DOUBLE_EQ(weakSmall.excess, -1000);
  EXPECT_DOUBLE_EQ(weakSmall.noise, 1998);
  EXPECT_TRUE(weakSmall.withinNoise);
  // The report marks the noisy context.
  const auto out = csp_diff(p.string() + " " + q.string(), 0);
  EXPECT_NE(out.find("~ main > m.c:1"), std::string::npos) << out;
  EXPECT_NE(out.find("  main > m.c:2"), std::string::npos) << out;
}

TEST_F(Diff, ReportNamesTheTopLossAndOneRunContexts) {
  const auto [p, q] = runs(kStrong, "report");
  const auto out = csp_diff(p.string() + " " + q.string() + " --top 4", 0);
  EXPECT_NE(out.find("strong scaling of cpu-time, p = 2 -> q = 4 (ranks)"), std::string::npos) << out;
  EXPECT_NE(out.find("scaling loss 4.32% of the q run"), std::string::npos) << out;
  // The first row under the top-contexts header is the collective.
  const auto top = out.find("Top 4 contexts by inclusive loss");
  ASSERT_NE(top, std::string::npos) << out;
  const auto firstRow = out.find('\n', out.find('\n', top) + 1) + 1;
  const auto row = out.substr(firstRow, out.find('\n', firstRow) - firstRow);
  EXPECT_NE(row.find("main > main.c:20 > MPI_Allreduce"), std::string::npos) << out;
  EXPECT_NE(row.find("7.41%"), std::string::npos) << row;
  EXPECT_NE(row.find("171.43%"), std::string::npos) << row;
  EXPECT_NE(out.find("Largest gains"), std::string::npos) << out;
  EXPECT_NE(out.find("-12.35%"), std::string::npos) << out;  // solve
  EXPECT_NE(out.find("3 only in run Q (+), 3 only in run P (-)"), std::string::npos) << out;
  EXPECT_NE(out.find("+ main > main.c:30 > redistribute"), std::string::npos) << out;
  EXPECT_NE(out.find("- main > main.c:60 > legacy"), std::string::npos) << out;
  // Call sites are not listed: their callees carry the same values; nor are pass-through frames
  // (MPI_Allreduce's only cost is its statement, which names it).
  EXPECT_EQ(out.find("main.c:20\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("MPI_Allreduce\n"), std::string::npos) << out;
  // The hot path of the loss ends at the collective.
  EXPECT_NE(out.find("loss hot path"), std::string::npos) << out;
  EXPECT_NE(out.find("\n    main > MPI_Allreduce > allreduce.c:1\n"), std::string::npos) << out;
}

TEST_F(Diff, RunDirectoriesHoldingDb) {
  const auto [p, q] = runs(kStrong, "layout");
  std::filesystem::create_directories(dir / "run-p2");
  std::filesystem::create_directories(dir / "run-p4");
  std::filesystem::rename(p, dir / "run-p2" / "db");
  std::filesystem::rename(q, dir / "run-p4" / "db");
  const auto out = csp_diff((dir / "run-p2").string() + " " + (dir / "run-p4").string(), 0);
  EXPECT_NE(out.find("run-p2/db"), std::string::npos) << out;
}

// The result is a normal database: CCT, Real metrics, RealAccumulator summaries, one pseudo-profile.
TEST_F(Diff, ResultDatabaseOpensWithTheRightContent) {
  const auto [p, q] = runs(kStrong, "db");
  const auto out = dir / "scaling-db";
  csp_diff(p.string() + " " + q.string() + " --quiet -o " + out.string(), 0);
  const auto db = storage::Database::open(out);
  const auto& meta = db->metadata();
  EXPECT_NE(meta.title.find("strong scaling loss of cpu-time"), std::string::npos) << meta.title;
  EXPECT_NE(meta.title.find("db-p2 (p = 2)"), std::string::npos) << meta.title;
  EXPECT_NE(meta.title.find("db-p4 (q = 4)"), std::string::npos) << meta.title;
  EXPECT_EQ(meta.nodeCount, 18u);
  ASSERT_EQ(meta.profiles.size(), 1u);
  ASSERT_EQ(meta.metrics.size(), analysis::diffMetricNames().size());
  std::map<std::string, storage::MetricId> metric;
  for (storage::MetricId m = 0; m < meta.metrics.size(); ++m) {
    EXPECT_EQ(meta.metrics[m].valueType, storage::ValueType::Real);
    metric[meta.metrics[m].descriptor.name] = m;
  }
  EXPECT_EQ(meta.metrics[metric.at("loss")].descriptor.unit, "%");
  EXPECT_EQ(meta.metrics[metric.at("excess")].descriptor.unit, "units");
  std::map<std::string, std::string> props;
  for (const auto& s : meta.properties) props[s.key] = s.value;
  EXPECT_EQ(props["generator"], "csp-diff");
  EXPECT_EQ(props["diff.mode"], "strong");
  EXPECT_EQ(props["diff.p"], "2");
  EXPECT_EQ(props["diff.q"], "4");
  EXPECT_EQ(props["diff.metric"], "cpu-time");
  EXPECT_EQ(props["diff.total-excess"], "70");

  // Find nodes by walking the stored CCT.
  const auto& s = meta.strings;
  auto child = [&](storage::NodeId parent, ScopeKind kind, const std::string& text, std::uint32_t line = 0) {
    for (auto c : db->children(parent)) {
      const auto n = *db->node(c);
      if (n.kind == kind && (kind == ScopeKind::ProcFrame ? s[n.name] == text : s[n.file] == text && n.line == line))
        return c;
    }
    ADD_FAILURE() << "no child " << text << ":" << line << " of " << parent;
    return storage::NodeId{0};
  };
  auto value = [&](storage::NodeId node, const std::string& name, storage::MetricScope scope) -> std::optional<double> {
    for (const auto& a : db->summaries(node))
      if (a.metric == metric.at(name) && a.scope == scope) {
        const auto acc = metrics::decodeRealAccumulator(a.bytes);
        EXPECT_EQ(acc.count(), 1u);
        return acc.finalize(1, metrics::Population::All).sum;
      }
    return std::nullopt;
  };
  const auto main = child(0, ScopeKind::ProcFrame, "main");
  const auto arCall = child(main, ScopeKind::CallSite, "main.c", 20);
  const auto ar = child(arCall, ScopeKind::ProcFrame, "MPI_Allreduce");
  const auto arStmt = child(ar, ScopeKind::Stmt, "allreduce.c", 1);
  const auto serial = child(main, ScopeKind::Stmt, "main.c", 50);
  const auto redistCall = child(main, ScopeKind::CallSite, "main.c", 30);
  const auto legacy = child(child(main, ScopeKind::CallSite, "main.c", 60), ScopeKind::ProcFrame, "legacy");
  EXPECT_EQ(s[db->node(ar)->module], "/opt/mpi-b/lib/libmpi.so");  // the q run's path

  EXPECT_DOUBLE_EQ(*value(0, "sum-p", I), 1550);
  EXPECT_DOUBLE_EQ(*value(0, "sum-q", I), 1620);
  EXPECT_DOUBLE_EQ(*value(0, "excess", I), 70);
  EXPECT_DOUBLE_EQ(*value(ar, "excess", I), 120);
  EXPECT_DOUBLE_EQ(*value(ar, "excess", E), 120);
  EXPECT_DOUBLE_EQ(*value(ar, "loss", I), 100.0 * 120 / 1620);
  EXPECT_DOUBLE_EQ(*value(ar, "share", I), 100.0 * 120 / 70);
  EXPECT_FALSE(value(arCall, "excess", E));  // no cost of its own in either run
  EXPECT_DOUBLE_EQ(*value(main, "excess", E), 100);
  EXPECT_FALSE(value(legacy, "sum-q", I));
  EXPECT_DOUBLE_EQ(*value(legacy, "sum-p", I), 10);
  // Compute scales perfectly: its excess is a stored 0, not absent.
  const auto compute = child(child(main, ScopeKind::CallSite, "main.c", 10), ScopeKind::ProcFrame, "compute");
  EXPECT_DOUBLE_EQ(*value(compute, "excess", I), 0);
  EXPECT_DOUBLE_EQ(*value(compute, "loss", I), 0);
  // Presence marks: E 1 at the node, I the count of one-run-only nodes in the subtree.
  EXPECT_DOUBLE_EQ(*value(redistCall, "only-q", E), 1);
  EXPECT_DOUBLE_EQ(*value(redistCall, "only-q", I), 3);
  EXPECT_DOUBLE_EQ(*value(main, "only-q", I), 3);
  EXPECT_DOUBLE_EQ(*value(0, "only-p", I), 3);
  EXPECT_FALSE(value(main, "only-q", E));
  EXPECT_FALSE(value(ar, "noise", I));  // exact metric: no sampling error

  // Linear metrics combine as the Callers and Flat views combine instances: the sum of the
  // excess of two contexts is their joint excess.
  auto acc = metrics::RealAccumulator::forCombinedNode();
  for (auto node : {arStmt, serial})
    for (const auto& a : db->summaries(node))
      if (a.metric == metric.at("excess") && a.scope == E) acc.combineInstance(metrics::decodeRealAccumulator(a.bytes));
  EXPECT_DOUBLE_EQ(acc.finalize(1, metrics::Population::All).sum, 220);

  // The pseudo-profile's per-thread values mirror the summaries in both orders.
  const auto byNode = db->nodeValues(ar, metric.at("excess"), I);
  ASSERT_EQ(byNode.size(), 1u);
  EXPECT_EQ(byNode[0].profile, 0u);
  EXPECT_DOUBLE_EQ(std::bit_cast<double>(byNode[0].value), 120);
  bool seen = false;
  for (const auto& v : db->profileValues(0))
    if (v.node == 0 && v.metric == metric.at("loss") && v.scope == I) {
      EXPECT_DOUBLE_EQ(std::bit_cast<double>(v.value), 100.0 * 70 / 1620);
      seen = true;
    }
  EXPECT_TRUE(seen);

  // The output is not replaced without --force, and is with it; nothing temporary is left.
  auto refused = csp_diff(p.string() + " " + q.string() + " -o " + out.string(), 1);
  EXPECT_NE(refused.find("csp-diff: error: "), std::string::npos) << refused;
  EXPECT_EQ(refused.find("Top "), std::string::npos) << "no report for a failed run: " << refused;
  csp_diff(p.string() + " " + q.string() + " --weak --quiet --force -o " + out.string(), 0);
  {
    std::map<std::string, std::string> replaced;
    // The database must outlive the loop: a range-for over a member of a temporary would not.
    const auto reopened = storage::Database::open(out);
    for (const auto& setting : reopened->metadata().properties) replaced[setting.key] = setting.value;
    EXPECT_EQ(replaced["diff.mode"], "weak");
  }
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".scaling-db.tmp"), std::string::npos) << e.path();
  // The same runs give the same database, entry for entry.
  const auto twin = dir / "twin-db";
  csp_diff(p.string() + " " + q.string() + " --weak --quiet -o " + twin.string(), 0);
  auto dump = [](const std::filesystem::path& path) {
    const auto d = storage::Database::open(path);
    std::vector<std::string> entries;
    for (const auto& family : storage::databaseColumnFamilies())
      d->forEachEntry(family, [&](std::string_view k, std::string_view v) {
        entries.push_back(family + ":" + std::string(k) + "=" + std::string(v));
      });
    return entries;
  };
  EXPECT_EQ(dump(out), dump(twin));  // the metadata names the inputs, never the output
  // A diff database is no run.
  const auto again = csp_diff(out.string() + " " + q.string(), 1);
  EXPECT_NE(again.find("is a csp-diff result, not a run"), std::string::npos) << again;
}

TEST_F(Diff, Refusals) {
  const auto [p, q] = runs(kStrong, "refuse");
  const auto out = dir / "never";
  auto refuse = [&](const std::string& args, const std::string& message) {
    const auto text = csp_diff(args + " -o " + out.string(), 1);
    EXPECT_NE(text.find(message), std::string::npos) << args << "\n" << text;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  };
  refuse(p.string() + " " + p.string(), "are the same run");
  // The same database reached as a run directory and directly.
  std::filesystem::create_directories(dir / "run");
  std::filesystem::create_directory_symlink(p, dir / "run" / "db");
  refuse((dir / "run").string() + " " + p.string(), "are the same run");
  refuse(q.string() + " " + p.string(), "p = 4 (ranks");
  refuse(p.string() + " " + q.string() + " --p 4 --q 4", "is not smaller than q = 4");
  refuse(p.string() + " " + q.string() + " --metric cycles", "no metric 'cycles' (it has: cpu-time)");
  const auto other = database("other-metric", runSpec(kStrong, 4, true, R"({"name": "t", "unit": "units"})"));
  refuse(p.string() + " " + other.string(), "no metric in common");
  refuse(p.string() + " " + (dir / "nowhere").string(), "no such run or database");
  std::filesystem::create_directories(dir / "empty");
  refuse(p.string() + " " + (dir / "empty").string(), "neither a CSP database");
  // Damaged: every table file overwritten with garbage.
  const auto broken = dir / "broken";
  std::filesystem::copy(q, broken, std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::directory_iterator(broken))
    if (e.path().extension() == ".sst") {
      const auto size = std::filesystem::file_size(e.path());
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << std::string(size, 'x');
    }
  refuse(p.string() + " " + broken.string(), "damaged database");
  // Never its own input, however spelled (issue: csp-diff victim other -o victim --force).
  const auto before = csp::test::dumpDatabase(p);
  for (const auto& spelled :
       {p.string(), (p.parent_path() / "." / p.filename()).string(), (dir / "run" / "db").string()}) {
    const auto text = csp_diff(p.string() + " " + q.string() + " --force -o " + spelled, 1);
    EXPECT_NE(text.find("csp-diff never writes over its inputs"), std::string::npos) << spelled << "\n" << text;
    const auto text2 = csp_diff(q.string() + " " + p.string() + " --p 8 --q 16 --force -o " + spelled, 1);
    EXPECT_NE(text2.find("csp-diff never writes over its inputs"), std::string::npos) << spelled << "\n" << text2;
  }
  // Nor into one: a directory inside an input database, reached directly or through links.
  std::filesystem::create_directory_symlink(p, dir / "alias");
  for (const auto& spelled :
       {(p / "x").string(), (dir / "run" / "db" / "x").string(), (dir / "alias" / "x" / "y").string()}) {
    const auto text = csp_diff(p.string() + " " + q.string() + " --force -o " + spelled, 1);
    EXPECT_NE(text.find(": is inside the input " + p.string() + "; csp-diff never writes over its inputs"),
              std::string::npos)
        << spelled << "\n"
        << text;
    const auto text2 = csp_diff((dir / "run").string() + " " + q.string() + " -o " + spelled, 1);
    EXPECT_NE(text2.find(": is inside the input " + (dir / "run").string() + "; csp-diff never writes over its inputs"),
              std::string::npos)
        << spelled << "\n"
        << text2;
  }
  EXPECT_FALSE(std::filesystem::exists(p / "x"));
  EXPECT_EQ(csp::test::dumpDatabase(p), before);
  const auto both = run(tool("csp-diff") + " --strong --weak " + p.string() + " " + q.string());
  EXPECT_NE(both.status, 0);
  EXPECT_NE(both.output.find("excludes"), std::string::npos) << both.output;
}

// Databases that open but whose content is inconsistent: written with the storage API directly,
// the way a buggy or interrupted writer could have.
TEST_F(Diff, InconsistentDatabasesAreDamaged) {
  const auto [p, q] = runs(kStrong, "inconsistent");
  enum class Defect { ParentCycle, MissingNode, GarbageSummary };
  auto write = [&](const std::string& name, Defect defect) {
    const auto target = dir / name;
    storage::DatabaseBuilder builder(target);
    storage::ShardWriter shard(builder.stagingDir(), 0);
    shard.putNode(0, {});
    shard.putNode(1, {defect == Defect::ParentCycle ? 2u : 0u, ScopeKind::ProcFrame, 1, 0, 0, 0});
    if (defect != Defect::MissingNode) shard.putNode(2, {1, ScopeKind::Stmt, 0, 0, 0, 5});
    shard.putSummary(
        0, 0, I, defect == Defect::GarbageSummary ? std::string("\x11\xff") : [] {
          metrics::IntAccumulator a;
          a.accumulate(0, 7);
          return metrics::encode(a);
        }());
    shard.finish();
    storage::DatabaseMetadata meta;
    meta.nodeCount = 3;
    meta.processCount = 1;
    meta.threadCount = 1;
    meta.metrics = {{{"cpu-time", "units", MetricKind::Sampled, 1, ""}, storage::ValueType::Count}};
    meta.profiles = {IdTuple{{IdKind::Rank, 0}}};
    meta.strings = {"", "main"};
    builder.writeMetadata(meta);
    builder.ingestShards(1);
    builder.publish();
    return target;
  };
  const std::pair<Defect, std::string> cases[] = {
      {Defect::ParentCycle, "damaged database: 2 of 3 CCT nodes are not below the root"},
      {Defect::MissingNode, "damaged database: CCT nodes: node 2 is missing"},
      {Defect::GarbageSummary, "damaged database: summary of CCT node 0 (cpu-time, I)"},
  };
  int k = 0;
  for (const auto& [defect, message] : cases) {
    const auto bad = write("bad" + std::to_string(k++), defect);
    const auto text = csp_diff(p.string() + " " + bad.string() + " --q 8", 1);
    EXPECT_NE(text.find(message), std::string::npos) << text;
  }
}

// End to end on a real MPI program measured by csp-run at 2 and 4 ranks: replicated_setup does
// the same work on every rank (its total doubles), solve splits a fixed total. The report must
// name replicated_setup as where the loss is. Skipped until csp-run is built in this tree.
// A q run that is faster overall (a gain elsewhere outweighs the loss): the scaling loss of the
// whole is negative, and the Callers view of the loss still shows its largest contributors,
// the loss and the gain, by size, with percentages of the total's size.
TEST_F(Diff, CallersViewOfANegativeTotalShowsTheLargestContributors) {
  auto spec = [](int ranks, int a, int b) {
    std::string threads;
    for (int r = 0; r < ranks; ++r)
      threads += std::string(r ? "," : "") + R"({"id": {"rank": )" + std::to_string(r) + R"(}, "samples": [
        {"path": [{"proc": "main"}, {"callsite": "m.c:2"}, {"proc": "grows", "file": "g.c", "line": 1}, {"stmt": "g.c:2"}], "counts": {"c": )" +
                 std::to_string(a) + R"(}},
        {"path": [{"proc": "main"}, {"callsite": "m.c:3"}, {"proc": "shrinks", "file": "s.c", "line": 1}, {"stmt": "s.c:2"}], "counts": {"c": )" +
                 std::to_string(b) + R"(}}]})";
    return R"({"metrics": [{"name": "c", "unit": "count", "kind": "counted"}], "threads": [)" + threads + "]}";
  };
  const auto p = database("neg-p2", spec(2, 100, 100));  // 200 + 200
  const auto q = database("neg-p4", spec(4, 75, 10));    // 300 + 40: +100 and -160, total -60
  csp_diff(p.string() + " " + q.string() + " -o " + (dir / "neg-db").string(), 0);
  const auto r = run(tool("csp-views") + " --callers --sort sum:exclusive --top 6 " + (dir / "neg-db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto grows = r.output.find("grows"), shrinks = r.output.find("shrinks");
  EXPECT_NE(grows, std::string::npos) << r.output;
  EXPECT_NE(shrinks, std::string::npos) << r.output;
  EXPECT_LT(shrinks, grows) << "the larger contributor (the gain) first: " << r.output;
}

TEST_F(Diff, EndToEndWithCspRunNamesTheNonScalingPart) {
  ASSERT_TRUE(std::filesystem::exists(tool("csp-run"))) << "csp-run is not built";
  // On a loaded machine CPU-time timer signals arrive late and the missed periods' weight lands in
  // the code that follows (docs/measurement.md, "Limits"): a cold CI run beside the sanitizer
  // build once moved 0.2 s of solve's time into its neighbours. As in the test below, the split
  // is taken from the first of three measurements in which it holds, and every relation is
  // asserted on the last measurement taken.
  std::string out;
  analysis::ScalingDiff d;
  WorkSplit split;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSERT_NO_FATAL_FAILURE(measureScalingApp("run", "", "400 300"));
    std::filesystem::remove_all(dir / "scaling-db");
    out = csp_diff((dir / "run-p2").string() + " " + (dir / "run-p4").string() + " -o " + (dir / "scaling-db").string(),
                   0);
    d = diff(dir / "run-p2" / "db", dir / "run-p4" / "db");
    split = workSplit(d, "solve");
    if (split.holds()) break;
    std::printf("attempt %d: the work's split moved (setup excess %.3g of the p run's %.3g, solve's %.3g)\n", attempt,
                split.setup, split.setupP, split.other);
  }
  EXPECT_NE(out.find("p = 2 -> q = 4 (ranks)"), std::string::npos) << out;
  // The hot path of the loss ends in replicated_setup; solve is not on it.
  const auto hot = out.find("loss hot path");
  ASSERT_NE(hot, std::string::npos) << out;
  const auto pathStart = out.find('\n', hot) + 1;
  const auto path = out.substr(pathStart, out.find('\n', pathStart) - pathStart);
  EXPECT_NE(path.find("main > replicated_setup"), std::string::npos) << out;
  EXPECT_EQ(path.find("solve"), std::string::npos) << out;
  // Library view: replicated_setup holds most of the loss; solve's excess is small beside it.
  // 4 x 300 - 2 x 300 units of CPU time more in setup, as much as the p run's setup in all;
  // solve ideally 0. (Relations, not nominal times: the machine may be loaded.)
  EXPECT_GT(split.setup, 0.5 * d.total().excess) << out;
  EXPECT_GT(split.setup, 0.6 * split.setupP) << out;
  EXPECT_LT(std::fabs(split.other), 0.25 * split.setup) << out;
  EXPECT_TRUE(storage::Database::open(dir / "scaling-db"));
}

// Waiting versus compute (csp-run --idleness): rank 0 alone computes root_only before the final
// MPI_Allreduce, for which every other rank waits. With twice the ranks, twice as many wait, so
// mpi-wait grows at the MPI_Allreduce call in main, while the compute that grows is
// replicated_setup's work. csp-diff --metric mpi-wait and --metric work tell the two apart, and
// the report's "Waiting and compute" section gives the totals.
TEST_F(Diff, EndToEndSeparatesWaitingFromCompute) {
  ASSERT_TRUE(std::filesystem::exists(tool("csp-run"))) << "csp-run is not built";
  const auto p = dir / "wait-p2" / "db", q = dir / "wait-p4" / "db";
  analysis::DiffOptions waitOptions;
  waitOptions.metric = "mpi-wait";
  analysis::DiffOptions workOptions;
  workOptions.metric = "work";
  // On a loaded virtual machine the kernel delivers CPU-time timer signals late, and the weight
  // of the periods they missed lands in the code that follows (docs/measurement.md, "Limits"):
  // the split of the work between replicated_setup, solve and root_only, and the MPI_Allreduce
  // after them, moved by up to half a phase (a plain timer program without csp shows the same).
  // The split is therefore taken from the first of three measurements in which it holds; every
  // relation, the split's included, is asserted on the last measurement taken.
  analysis::ScalingDiff waiting, compute;
  WorkSplit split;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSERT_NO_FATAL_FAILURE(measureScalingApp("wait", " --idleness", "200 150 300 block"));
    waiting = diff(p, q, waitOptions);
    compute = diff(p, q, workOptions);
    split = workSplit(compute, "root_only");
    if (split.holds()) break;
    std::printf("attempt %d: the work's split moved (setup excess %.3g of the p run's %.3g, root_only's %.3g)\n",
                attempt, split.setup, split.setupP, split.other);
  }
  double rootWorkP = 0, rootWorkQ = 0;
  for (const auto& n : compute.nodes)
    if (n.kind == ScopeKind::ProcFrame && n.name == "root_only")
      rootWorkP += n.inclusive.sumP, rootWorkQ += n.inclusive.sumQ;
  // In each run, every rank but 0 waits for most of root_only's time, which is at least its CPU
  // time: 1 rank at p = 2, 3 at q = 4. The excess itself compares two runs' wall times, which a
  // loaded machine stretches differently (a p run whose root_only got a quarter of a core waited
  // more than the q run's three ranks did): its sign is not asserted, its place is.
  ASSERT_GT(rootWorkP, 0);
  ASSERT_GT(rootWorkQ, 0);
  EXPECT_GT(waiting.total().sumP, 0.5 * rootWorkP);
  EXPECT_GT(waiting.total().sumQ, 0.5 * 3 * rootWorkQ);
  double atMainP = 0, atMainQ = 0, inSetup = 0;
  for (const auto& n : waiting.nodes) {
    if (n.kind != ScopeKind::ProcFrame) continue;
    if (n.name == "main") atMainP += n.inclusive.sumP, atMainQ += n.inclusive.sumQ;
    if (n.name == "replicated_setup" || n.name == "solve" || n.name == "root_only") inSetup += n.inclusive.sumQ;
  }
  EXPECT_GT(atMainP, 0.9 * waiting.total().sumP) << "the waits are in main's MPI_Allreduce";
  EXPECT_GT(atMainQ, 0.9 * waiting.total().sumQ) << "the waits are in main's MPI_Allreduce";
  EXPECT_EQ(inSetup, 0.0) << "nobody waits in the compute functions";

  // 4 x 150 - 2 x 150 units more of replicated setup, as much as the p run's setup in all;
  // root_only is the same in both runs.
  EXPECT_GT(split.setup, 0.6 * split.setupP);
  EXPECT_LT(std::fabs(split.other), 0.25 * split.setup);

  // The report of any metric gives both totals side by side.
  const auto out = csp_diff(p.string() + " " + q.string(), 0);
  EXPECT_NE(out.find("Waiting and compute"), std::string::npos) << out;
  EXPECT_NE(out.find("compute (work) grew by +"), std::string::npos) << out;
  const auto states = analysis::stateExcess(*storage::Database::open(p), *storage::Database::open(q), compute);
  double waitingExcess = 0;
  for (const auto& s : states)
    if (s.metric == "mpi-wait") waitingExcess = s.excess;
  EXPECT_DOUBLE_EQ(waitingExcess, waiting.total().excess);
}

}  // namespace
