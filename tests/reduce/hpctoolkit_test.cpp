// csp-prof-mpi --hpctoolkit and csp-export: the HPCToolkit database written from a CSP database
// reads back, through a reader written from HPCToolkit's FORMATS.md alone
// (tests/common/hpctoolkit_reader.hpp), with every per-thread inclusive and exclusive value of
// every context and every summary statistic equal to the CSP database's; the same bytes for any
// process count; nothing left behind by a failed export.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/hpctoolkit_reader.hpp"
#include "common/test_support.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
namespace hpc = csp::test::hpctoolkit;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// docs/hpctoolkit.md: the metric's name there.
std::string expectedName(const MetricDescriptor& d) {
  const std::string base = d.name == "cpu-time" ? "CPUTIME" : d.name == "real-time" ? "REALTIME" : d.name;
  return d.unit.empty() ? base : base + " (" + d.unit + ")";
}

double valueOf(std::uint64_t stored, storage::ValueType type) {
  return type == storage::ValueType::Real ? std::bit_cast<double>(stored) : static_cast<double>(stored);
}

// The ids the meta.db gives each CSP metric: propagated per scope, and the summary statistics.
struct Ids {
  std::uint16_t prop[2] = {0, 0};                // by storage::MetricScope
  std::map<std::string, std::uint16_t> stat[2];  // "count", "sum", "squares", "min", "max"
};

std::vector<Ids> metricIds(const hpc::Meta& meta, const storage::DatabaseMetadata& csp) {
  std::vector<Ids> out;
  EXPECT_EQ(meta.metrics.size(), csp.metrics.size());
  for (std::size_t m = 0; m < csp.metrics.size() && m < meta.metrics.size(); ++m) {
    const auto& hm = meta.metrics[m];
    EXPECT_EQ(hm.name, expectedName(csp.metrics[m].descriptor));
    Ids ids;
    auto scopeIndex = [](const std::string& name) { return name == "function" ? 0 : name == "execution" ? 1 : -1; };
    EXPECT_EQ(hm.scopes.size(), 2u);
    for (const auto& [scope, id] : hm.scopes) {
      const int s = scopeIndex(scope);
      EXPECT_GE(s, 0) << scope;
      if (s >= 0) ids.prop[s] = id;
    }
    for (const auto& su : hm.summaries) {
      const int s = scopeIndex(su.scope);
      if (s < 0) continue;
      const std::string what = su.combine == 1      ? "min"
                               : su.combine == 2    ? "max"
                               : su.formula == "$$" ? "sum"
                               : su.formula == "1"  ? "count"
                                                    : "squares";
      if (what == "squares") {
        EXPECT_NE(su.formula.find("^2"), std::string::npos) << su.formula;
      }
      EXPECT_TRUE(ids.stat[s].emplace(what, su.id).second) << what << " twice";
    }
    for (int s = 0; s < 2; ++s) EXPECT_EQ(ids.stat[s].size(), 5u);
    out.push_back(ids);
  }
  // Scope definitions: the inclusive one is HPCToolkit's standard "execution" (type 2).
  for (const auto& sc : meta.scopes)
    if (sc.name == "execution") {
      EXPECT_EQ(sc.type, 2);
    }
  return out;
}

// What the CSP database says the summary statistics are.
std::map<std::string, double> expectedStatistics(const storage::Accumulator& a, storage::ValueType type) {
  std::map<std::string, double> s;
  if (type == storage::ValueType::Real) {
    const auto r = metrics::decodeRealAccumulator(a.bytes);
    const double n = static_cast<double>(r.count());
    s = {{"count", n}, {"sum", r.mean() * n}, {"squares", r.m2() + n * r.mean() * r.mean()}};
    if (r.count()) s.insert({{"min", r.min()}, {"max", r.max()}});
  } else {
    const auto i = metrics::decodeIntAccumulator(a.bytes);
    s = {
        {"count", static_cast<double>(i.count())},
        {"sum", static_cast<double>(i.sum())},
        {"squares", std::ldexp(static_cast<double>(i.sumSquaresHigh()), 128) + static_cast<double>(i.sumSquaresLow())}};
    if (i.count()) s.insert({{"min", static_cast<double>(i.min())}, {"max", static_cast<double>(i.max())}});
  }
  for (auto it = s.begin(); it != s.end();) it = it->second == 0 ? s.erase(it) : std::next(it);
  return s;
}

struct Checked {
  std::uint64_t profileValues = 0, contextValues = 0, statistics = 0, contexts = 0;
};

// The context tree: node n is context n + 1 below its parent's, kinds and names as documented.
void expectTree(const hpc::Meta& meta, const storage::Database& db, Checked& checked) {
  const auto& strings = db.metadata().strings;
  const auto cct = db.readCct();
  ASSERT_EQ(meta.entries.size(), 1u);
  EXPECT_EQ(meta.entries[0].id, 1u);
  EXPECT_EQ(meta.entries[0].kind, 1);  // main thread
  ASSERT_EQ(meta.contexts.size() + 1, cct.size());
  for (storage::NodeId n = 1; n < cct.size(); ++n) {
    const auto it = meta.contexts.find(n + 1);
    ASSERT_NE(it, meta.contexts.end()) << "node " << n;
    const auto& c = it->second;
    const auto& node = cct[n];
    SCOPED_TRACE("node " + std::to_string(n) + " " + toString(node.kind));
    EXPECT_EQ(c.parent, node.parent + 1);
    EXPECT_EQ(c.propagation, 0);
    switch (node.kind) {
      case ScopeKind::ProcFrame:
        EXPECT_EQ(c.lexicalType, 0);
        EXPECT_EQ(c.relation, 1);
        ASSERT_TRUE(c.hasFunction);
        EXPECT_EQ(c.function.name, strings[node.name].empty() ? "[unknown procedure]" : strings[node.name]);
        EXPECT_EQ(c.function.module, strings[node.module]);
        EXPECT_EQ(c.function.file, strings[node.file]);
        EXPECT_EQ(c.function.line, node.line);
        break;
      case ScopeKind::Alien:
        EXPECT_EQ(c.lexicalType, 0);
        EXPECT_EQ(c.relation, 2);
        ASSERT_TRUE(c.hasFunction);
        EXPECT_EQ(c.function.name, strings[node.name].empty() ? "[inlined code]" : strings[node.name]);
        ASSERT_TRUE(c.hasSrcLoc);
        if (!strings[node.file].empty()) {
          EXPECT_EQ(c.file, strings[node.file]);
        }
        EXPECT_EQ(c.line, node.line);
        break;
      case ScopeKind::Loop:
      case ScopeKind::CallSite:
      case ScopeKind::Stmt:
        EXPECT_EQ(c.lexicalType, node.kind == ScopeKind::Loop ? 1 : 2);
        EXPECT_EQ(c.relation, 0);
        ASSERT_TRUE(c.hasSrcLoc);
        if (!strings[node.file].empty()) {
          EXPECT_EQ(c.file, strings[node.file]);
        }
        EXPECT_EQ(c.line, node.line);
        break;
      case ScopeKind::Root:
        ADD_FAILURE() << "a second root";
    }
    ++checked.contexts;
  }
}

void expectProfiles(const std::vector<hpc::Profile>& profiles, const storage::Database& db, const std::vector<Ids>& ids,
                    Checked& checked) {
  const auto& meta = db.metadata();
  ASSERT_EQ(profiles.size(), meta.profiles.size() + 1);
  for (storage::ProfileId p = 0; p < meta.profiles.size(); ++p) {
    SCOPED_TRACE("profile " + std::to_string(p));
    const auto& got = profiles[p + 1];
    EXPECT_FALSE(got.summary);
    ASSERT_EQ(got.idTuple.size(), meta.profiles[p].size());
    for (std::size_t k = 0; k < got.idTuple.size(); ++k)
      EXPECT_EQ(got.idTuple[k].physicalId, meta.profiles[p][k].value);
    hpc::ProfileValues expected;
    for (const auto& v : db.profileValues(p)) {
      const double x = valueOf(v.value, meta.metrics[v.metric].valueType);
      const auto id = ids[v.metric].prop[static_cast<int>(v.scope)];
      expected[v.node + 1][id] = x;
      if (v.node == 0) expected[0][id] = x;  // the global context repeats the root
    }
    EXPECT_EQ(got.values, expected);
    for (const auto& [c, vals] : got.values) checked.profileValues += vals.size();
  }
}

void expectContexts(const std::vector<hpc::ContextValues>& contexts, const storage::Database& db,
                    const std::vector<Ids>& ids, Checked& checked) {
  const auto& meta = db.metadata();
  ASSERT_EQ(contexts.size(), std::size_t{meta.nodeCount} + 1);
  for (storage::NodeId n = 0; n < meta.nodeCount; ++n) {
    hpc::ContextValues expected;
    for (const auto& v : db.nodeValues(n))
      expected[ids[v.metric].prop[static_cast<int>(v.scope)]][v.profile + 1] =
          valueOf(v.value, meta.metrics[v.metric].valueType);
    EXPECT_EQ(contexts[n + 1], expected) << "node " << n;
    for (const auto& [m, vals] : contexts[n + 1]) checked.contextValues += vals.size();
  }
  EXPECT_EQ(contexts[0], contexts[1]);
}

void expectSummaries(const hpc::Profile& summary, const storage::Database& db, const std::vector<Ids>& ids,
                     Checked& checked) {
  const auto& meta = db.metadata();
  EXPECT_TRUE(summary.summary);
  EXPECT_TRUE(summary.idTuple.empty());
  hpc::ProfileValues expected;
  for (storage::NodeId n = 0; n < meta.nodeCount; ++n)
    for (const auto& a : db.summaries(n)) {
      if (a.metric >= meta.metrics.size()) continue;
      for (const auto& [what, x] : expectedStatistics(a, meta.metrics[a.metric].valueType)) {
        const auto id = ids[a.metric].stat[static_cast<int>(a.scope)].at(what);
        expected[n + 1][id] = x;
        if (n == 0) expected[0][id] = x;
      }
    }
  EXPECT_EQ(summary.values, expected);
  for (const auto& [c, vals] : summary.values) checked.statistics += vals.size();
}

// Identifier tuples: each element's kind by its name in meta.db, HPCToolkit's own kinds with the
// numbers hpcrun gives them (NODE 1, RANK 2, THREAD 3, GPUCONTEXT 5, GPUSTREAM 6, CORE 7);
// logical ids equal physical ones except for the physical kinds (NODE, CORE), dense from 0.
void expectIdTuples(const hpc::Meta& meta, const std::vector<hpc::Profile>& profiles, const storage::Database& db) {
  static const std::map<IdKind, std::pair<std::string, int>> kExpected = {
      {IdKind::Node, {"NODE", 1}},          {IdKind::Rank, {"RANK", 2}},        {IdKind::Thread, {"THREAD", 3}},
      {IdKind::Core, {"CORE", 7}},          {IdKind::Process, {"PROCESS", -1}}, {IdKind::GpuContext, {"GPUCONTEXT", 5}},
      {IdKind::GpuStream, {"GPUSTREAM", 6}}};
  const auto& csp = db.metadata().profiles;
  for (std::size_t p = 0; p < csp.size() && p + 1 < profiles.size(); ++p)
    for (std::size_t k = 0; k < csp[p].size() && k < profiles[p + 1].idTuple.size(); ++k) {
      const auto& got = profiles[p + 1].idTuple[k];
      const auto& [name, number] = kExpected.at(csp[p][k].kind);
      ASSERT_LT(got.kind, meta.kindNames.size());
      EXPECT_EQ(meta.kindNames[got.kind], name) << "profile " << p;
      if (number >= 0) {
        EXPECT_EQ(got.kind, number) << name;
      }
      const bool physical = name == "NODE" || name == "CORE";
      EXPECT_EQ(got.flags & 1, physical ? 1 : 0) << name;
      if (!physical) {
        EXPECT_EQ(got.logicalId, got.physicalId) << name;
      }
    }
}

// metrics/default.yaml, read as HPCToolkit's METRICS.yaml: each metric has the variants hpcviewer
// shows (Sum, Mean, StdDev, CfVar, Min, Max), inclusive and exclusive, built from inputs that
// name that metric, the matching scope and the right statistic.
void expectTaxonomy(const hpc::Meta& meta, const fs::path& yaml) {
  struct Input {
    std::string metric, scope, formula, combine;
  };
  std::map<std::string, Input> inputs;
  std::map<std::string, std::map<std::string, std::map<std::string, std::string>>> roots;  // metric, variant, scope
  const std::regex input(R"re(^  - &(\S+) \{metric: "(.*)", scope: (\w+), formula: "(.*)", combine: (\w+)\}$)re");
  const std::regex root(R"re(^  - name: "(.*)"$)re"), variant(R"re(^      (\w+):$)re"),
      formula(R"re(^          (inclusive|exclusive): \{standard: (.*)\}$)re");
  std::istringstream in(slurp(yaml));
  std::string line, metric, var;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, input))
      inputs[m[1]] = {m[2], m[3], m[4], m[5]};
    else if (std::regex_match(line, m, root))
      metric = m[1];
    else if (std::regex_match(line, m, variant))
      var = m[1];
    else if (std::regex_match(line, m, formula))
      roots[metric][var][m[1]] = m[2];
  }
  ASSERT_EQ(roots.size(), meta.metrics.size());
  auto refs = [&](const std::string& f) {
    std::vector<Input> out;
    const std::regex ref(R"(\*([\w-]+))");
    for (std::sregex_iterator it(f.begin(), f.end(), ref), end; it != end; ++it) {
      const auto found = inputs.find((*it)[1]);
      EXPECT_NE(found, inputs.end()) << (*it)[1];
      if (found != inputs.end()) out.push_back(found->second);
    }
    return out;
  };
  const std::map<std::string, std::multiset<std::string>> kStatistics = {
      {"Sum", {"$$ sum"}},
      {"Mean", {"$$ sum", "1 sum"}},
      {"StdDev", {"($$^2) sum", "$$ sum", "1 sum", "1 sum"}},
      {"CfVar", {"($$^2) sum", "$$ sum", "$$ sum", "1 sum", "1 sum", "1 sum"}},
      {"Min", {"$$ min"}},
      {"Max", {"$$ max"}}};
  for (const auto& hm : meta.metrics) {
    SCOPED_TRACE(hm.name);
    const auto& variants = roots[hm.name];
    ASSERT_EQ(variants.size(), kStatistics.size());
    for (const auto& [name, statistics] : kStatistics)
      for (const auto& [scope, scopeName] : {std::pair{"inclusive", "execution"}, {"exclusive", "function"}}) {
        const auto it = variants.find(name);
        ASSERT_NE(it, variants.end()) << name;
        std::multiset<std::string> got;
        for (const auto& x : refs(it->second.at(scope))) {
          EXPECT_EQ(x.metric, hm.name);
          EXPECT_EQ(x.scope, scopeName);
          got.insert(x.formula + " " + x.combine);
        }
        EXPECT_EQ(got, statistics) << name << " " << scope;
      }
  }
}

// Everything in `hpctk` against the CSP database it was written from.
Checked expectSameValues(const fs::path& database, const fs::path& hpctk) {
  Checked checked;
  const auto db = storage::Database::open(database);
  const auto meta = hpc::readMeta(hpctk / "meta.db");
  const auto profiles = hpc::readProfiles(hpctk / "profile.db");
  const auto contexts = hpc::readContexts(hpctk / "cct.db");
  EXPECT_TRUE(fs::is_regular_file(hpctk / "metrics" / "default.yaml"));
  const auto ids = metricIds(meta, db->metadata());
  if (ids.size() != db->metadata().metrics.size()) return checked;
  expectTree(meta, *db, checked);
  expectIdTuples(meta, profiles, *db);
  expectTaxonomy(meta, hpctk / "metrics" / "default.yaml");
  expectProfiles(profiles, *db, ids, checked);
  expectContexts(contexts, *db, ids, checked);
  if (!profiles.empty()) expectSummaries(profiles[0], *db, ids, checked);
  return checked;
}

std::string prof(int np, const fs::path& meas, const fs::path& db, const std::string& extra = "") {
  return (np > 1 ? csp::test::mpirun(np) : std::string()) + "timeout -k 5 120 " + tool("csp-prof-mpi") + " -q " +
         meas.string() + " -o " + db.string() + " " + extra;
}

std::string exportTo(int np, const fs::path& db, const fs::path& out, const std::string& extra = "") {
  return (np > 1 ? csp::test::mpirun(np) : std::string()) + "timeout -k 5 120 " + tool("csp-export") + " -q " +
         db.string() + " --hpctoolkit " + out.string() + " " + extra;
}

fs::path sharedFig75Database() {
  return csp::test::sharedInput("hpctoolkit-fig75", [](const fs::path& dir) {
    return run(tool("csp-gen") + " --from-json " + CSP_TEST_DATA_DIR + "/fig75.json -o " + (dir / "meas").string())
                   .status == 0 &&
           run(prof(1, dir / "meas", dir / "db")).status == 0;
  });
}

TEST(Hpctoolkit, Fig75ReadsBackWithEveryValueEqual) {
  TempDir dir("hpctk-fig75");
  ASSERT_EQ(
      run(tool("csp-gen") + " --from-json " + CSP_TEST_DATA_DIR + "/fig75.json -o " + (dir / "meas").string()).status,
      0);
  const auto r = run(prof(1, dir / "meas", dir / "db", "--hpctoolkit " + (dir / "hpctk").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto checked = expectSameValues(dir / "db", dir / "hpctk");
  EXPECT_EQ(checked.contexts, 10u);
  EXPECT_GT(checked.profileValues, 0u);
  EXPECT_EQ(checked.profileValues, checked.contextValues + 2);  // + the global context's (root, inclusive) per thread

  // By hand (thesis Fig. 7.5, two threads with twice the counts in the second): main's exclusive
  // value is its own statements through its loops, 11 and 22; loop z keeps only its own, 10 and 20.
  const auto meta = hpc::readMeta(dir / "hpctk" / "meta.db");
  const auto profiles = hpc::readProfiles(dir / "hpctk" / "profile.db");
  const auto ids = metricIds(meta, storage::Database::open(dir / "db")->metadata());
  std::uint32_t mainCtx = 0, loopZ = 0;
  for (const auto& [id, c] : meta.contexts) {
    if (c.hasFunction && c.function.name == "main") mainCtx = id;
    if (c.lexicalType == 1 && c.line == 13) loopZ = id;
  }
  ASSERT_NE(mainCtx, 0u);
  ASSERT_NE(loopZ, 0u);
  const auto excl = ids[0].prop[0], incl = ids[0].prop[1];
  EXPECT_EQ(profiles[1].values.at(mainCtx).at(excl), 11);
  EXPECT_EQ(profiles[2].values.at(mainCtx).at(excl), 22);
  EXPECT_EQ(profiles[1].values.at(mainCtx).at(incl), 111);
  EXPECT_EQ(profiles[1].values.at(loopZ).at(excl), 10);
  EXPECT_EQ(profiles[2].values.at(loopZ).at(excl), 20);
  const auto& sum = profiles[0].values.at(loopZ);
  EXPECT_EQ(sum.at(ids[0].stat[0].at("sum")), 30);
  EXPECT_EQ(sum.at(ids[0].stat[0].at("count")), 2);
  EXPECT_EQ(sum.at(ids[0].stat[0].at("min")), 10);
  EXPECT_EQ(sum.at(ids[0].stat[0].at("max")), 20);
  EXPECT_EQ(sum.at(ids[0].stat[0].at("squares")), 500);
  EXPECT_EQ(profiles[0].values.at(0).at(ids[0].stat[1].at("sum")), 333);  // the global context
}

TEST(Hpctoolkit, RanksRecursionModulesAndARealMetricReadBackEqual) {
  TempDir dir("hpctk-ranks");
  ASSERT_EQ(run(tool("csp-gen") + " --from-json " + CSP_TEST_DATA_DIR + "/hpctoolkit_ranks.json -o " +
                (dir / "meas").string())
                .status,
            0);
  const auto r =
      run(prof(3, dir / "meas", dir / "db", "--derive 'half = cycles * 0.5' --hpctoolkit " + (dir / "hpctk").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto checked = expectSameValues(dir / "db", dir / "hpctk");
  EXPECT_GT(checked.contexts, 30u);
  EXPECT_GT(checked.statistics, 0u);

  const auto meta = hpc::readMeta(dir / "hpctk" / "meta.db");
  ASSERT_EQ(meta.metrics.size(), 3u);
  EXPECT_EQ(meta.metrics[0].name, "CPUTIME (ns)");  // the name Hatchet's reader looks for
  // Recursion: solve called from solve, three levels deep on rank 2; inlined axpy inside it.
  int solveDepth = 0, aliens = 0;
  std::set<std::string> modules;
  for (const auto& [id, c] : meta.contexts) {
    if (c.hasFunction && c.relation == 1) modules.insert(c.function.module);
    if (c.relation == 2) ++aliens;
    if (!(c.hasFunction && c.function.name == "solve")) continue;
    int depth = 0;
    for (auto p = c.parent; meta.contexts.count(p); p = meta.contexts.at(p).parent)
      if (meta.contexts.at(p).hasFunction && meta.contexts.at(p).function.name == "solve") ++depth;
    solveDepth = std::max(solveDepth, depth);
  }
  EXPECT_EQ(solveDepth, 2);
  EXPECT_GT(aliens, 0);
  EXPECT_TRUE(modules.count("libsolver.so") && modules.count("libm.so.6") && modules.count("libc.so.6") &&
              modules.count("solver"));
  // The identifier kinds keep HPCToolkit's names and numbers.
  ASSERT_GE(meta.kindNames.size(), 8u);
  EXPECT_EQ(meta.kindNames[1], "NODE");
  EXPECT_EQ(meta.kindNames[2], "RANK");
  EXPECT_EQ(meta.kindNames[3], "THREAD");
  const auto profiles = hpc::readProfiles(dir / "hpctk" / "profile.db");
  const auto db = storage::Database::open(dir / "db");
  for (std::size_t p = 0; p < db->metadata().profiles.size(); ++p)
    for (std::size_t k = 0; k < profiles[p + 1].idTuple.size(); ++k) {
      const auto& e = profiles[p + 1].idTuple[k];
      std::string name = toString(db->metadata().profiles[p][k].kind);
      for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      EXPECT_EQ(meta.kindNames.at(e.kind), name);
      EXPECT_EQ((e.flags & 1) != 0, name == "NODE");  // nodes are physical: logical ids dense from 0
      if (name == "NODE") {
        EXPECT_LT(e.logicalId, 2u);
      }
    }
}

TEST(Hpctoolkit, SameBytesForOneAndThreeProcesses) {
  TempDir dir("hpctk-np");
  ASSERT_EQ(run(tool("csp-gen") + " --from-json " + CSP_TEST_DATA_DIR + "/hpctoolkit_ranks.json -o " +
                (dir / "meas").string())
                .status,
            0);
  auto r = run(prof(2, dir / "meas", dir / "db", "--hpctoolkit " + (dir / "np2").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(exportTo(1, dir / "db", dir / "np1"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(exportTo(3, dir / "db", dir / "np3"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* f : {"meta.db", "profile.db", "cct.db", "metrics/default.yaml"}) {
    const auto one = slurp(dir / "np1" / f);
    EXPECT_FALSE(one.empty()) << f;
    EXPECT_TRUE(one == slurp(dir / "np3" / f)) << f << " differs between 1 and 3 processes";
    EXPECT_TRUE(one == slurp(dir / "np2" / f)) << f << " differs between csp-export and csp-prof-mpi --hpctoolkit";
  }
  // Several chunks of profiles (64 each) and of nodes, in rounds over the processes, one process
  // or three (a last round where some have no chunk).
  r = run(tool("csp-gen") + " --ranks 50 --threads 3 --nodes 400 --metrics 2 --seed 3 -o " + (dir / "gen").string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(prof(1, dir / "gen", dir / "gendb", "--hpctoolkit " + (dir / "gen-np1").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(exportTo(3, dir / "gendb", dir / "gen-np3"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* f : {"meta.db", "profile.db", "cct.db"})
    EXPECT_TRUE(slurp(dir / "gen-np1" / f) == slurp(dir / "gen-np3" / f)) << f;
  const auto checked = expectSameValues(dir / "gendb", dir / "gen-np3");
  EXPECT_EQ(storage::Database::open(dir / "gendb")->metadata().profiles.size(), 150u);
  EXPECT_GT(checked.contexts, 2 * 64u);

  // More processes than profiles and nodes to share: ranks with nothing of their own.
  r = run(exportTo(5, sharedFig75Database() / "db", dir / "fig-np5"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(exportTo(1, sharedFig75Database() / "db", dir / "fig-np1"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* f : {"meta.db", "profile.db", "cct.db"})
    EXPECT_TRUE(slurp(dir / "fig-np1" / f) == slurp(dir / "fig-np5" / f)) << f;
}

TEST(Hpctoolkit, MeasuredMpiRunReadsBackEqual) {
  TempDir dir("hpctk-measured");
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-mpi-split";
  auto r = run(csp::test::mpirun(2) + "timeout -k 5 120 " + tool("csp-run") + " -o " + (dir / "meas").string() +
               " -- " + app + " 30 1");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(prof(2, dir / "meas", dir / "db", "--hpctoolkit " + (dir / "hpctk").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto checked = expectSameValues(dir / "db", dir / "hpctk");
  EXPECT_GT(checked.profileValues, 20u);
  const auto meta = hpc::readMeta(dir / "hpctk" / "meta.db");
  bool main = false, heavy = false, loop = false;
  for (const auto& [id, c] : meta.contexts) {
    main |= c.hasFunction && c.function.name == "main" && c.function.module == "csp-app-mpi-split";
    heavy |= c.hasFunction && c.function.name == "work_heavy";
    loop |= c.lexicalType == 1;
  }
  EXPECT_TRUE(main && heavy && loop);
  EXPECT_EQ(meta.metrics.at(0).name, "CPUTIME (ns)");
}

TEST(Hpctoolkit, FailedExportLeavesNothingAndKeepsTheOldDatabase) {
  TempDir dir("hpctk-fail");
  const auto db = sharedFig75Database() / "db";
  setenv("CSP_FAULT_INJECT", "1:hpctoolkit", 1);
  auto r = run(exportTo(2, db, dir / "out"));
  unsetenv("CSP_FAULT_INJECT");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("injected failure in phase 'hpctoolkit'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
  for (const auto& e : fs::directory_iterator(dir.path())) ADD_FAILURE() << "left behind: " << e.path();

  // An existing HPCToolkit database survives a failed --force export unchanged.
  r = run(exportTo(1, db, dir / "out"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto before = slurp(dir / "out" / "profile.db");
  setenv("CSP_FAULT_INJECT", "0:hpctoolkit", 1);
  r = run(exportTo(2, db, dir / "out", "--force"));
  unsetenv("CSP_FAULT_INJECT");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(slurp(dir / "out" / "profile.db"), before);
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() == "out" ? 0 : 1;
  EXPECT_EQ(entries, 0u);
  // With --force a good export replaces it.
  r = run(exportTo(2, db, dir / "out", "--force"));
  ASSERT_EQ(r.status, 0) << r.output;
  expectSameValues(db, dir / "out");
}

// csp-prof-mpi --hpctoolkit: the HPCToolkit sink runs after the CSP database sink has published;
// its failure (on any rank) fails the run and leaves no HPCToolkit output and no staging
// directory, and the CSP database stays complete. A good run writes the same bytes as csp-export.
TEST(Hpctoolkit, ProfMpiSinkFailureKeepsTheCspDatabaseAndLeavesNoHpctoolkitOutput) {
  TempDir dir("hpctk-sink-fail");
  const auto meas = sharedFig75Database() / "meas";
  for (const char* rank : {"0", "1"}) {
    setenv("CSP_FAULT_INJECT", (std::string(rank) + ":hpctoolkit").c_str(), 1);
    auto r = run(prof(2, meas, dir / "db", "--force --hpctoolkit " + (dir / "out").string()));
    unsetenv("CSP_FAULT_INJECT");
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("injected failure in phase 'hpctoolkit'"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out"));
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename() != "db") ADD_FAILURE() << "left behind: " << e.path();
    EXPECT_EQ(storage::Database::open(dir / "db")->metadata().profiles.size(),
              storage::Database::open(sharedFig75Database() / "db")->metadata().profiles.size());
  }
  auto r = run(prof(2, meas, dir / "db", "--force --hpctoolkit " + (dir / "out").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(run(exportTo(1, dir / "db", dir / "exported")).status, 0);
  for (const char* f : {"meta.db", "profile.db", "cct.db", "metrics/default.yaml"})
    EXPECT_TRUE(slurp(dir / "out" / f) == slurp(dir / "exported" / f)) << f;
  expectSameValues(dir / "db", dir / "out");
}

TEST(Hpctoolkit, RefusesWhatItMustNotReplace) {
  TempDir dir("hpctk-refuse");
  const auto db = sharedFig75Database() / "db";
  const auto meas = sharedFig75Database() / "meas";
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "notes.txt") << "keep me\n";
  // Before the reduction: no CSP database is written when the HPCToolkit output is refused.
  auto r = run(prof(1, meas, dir / "db", "--hpctoolkit " + (dir / "mine").string()));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "db"));
  r = run(prof(1, meas, dir / "db", "--force --hpctoolkit " + (dir / "mine").string()));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("not an HPCToolkit database"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "db"));
  r = run(exportTo(2, db, dir / "mine", "--force"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("not an HPCToolkit database"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "mine" / "notes.txt"));
  fs::create_directory_symlink(dir / "mine", dir / "link");
  r = run(exportTo(1, db, dir / "link", "--force"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("symbolic link"), std::string::npos) << r.output;
  // An empty directory name is refused, not ignored (csp-prof-mpi) or failed on at publication.
  r = run(prof(1, meas, dir / "db", "--hpctoolkit ''"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("directory name is empty"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "db"));
  r = run(exportTo(1, db, "''"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("directory name is empty"), std::string::npos) << r.output;
  r = run(exportTo(1, dir / "no-such-db", dir / "out"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("no-such-db"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// The reader checks what it claims: a damaged file is an error, not silently different values.
TEST(Hpctoolkit, ReaderRejectsDamagedFiles) {
  TempDir dir("hpctk-damaged");
  ASSERT_EQ(run(exportTo(1, sharedFig75Database() / "db", dir / "out")).status, 0);
  auto damage = [&](const char* file, std::size_t at, char byte) {
    fs::copy_file(dir / "out" / file, dir / file, fs::copy_options::overwrite_existing);
    std::fstream f(dir / file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(byte);
  };
  const auto size = [&](const char* f) { return fs::file_size(dir / "out" / f); };
  damage("profile.db", size("profile.db") - 1, 'x');  // footer
  EXPECT_THROW(hpc::readProfiles(dir / "profile.db"), std::runtime_error);
  damage("cct.db", 0x28, 0x7f);  // nCtxs far beyond the file
  EXPECT_THROW(hpc::readContexts(dir / "cct.db"), std::runtime_error);
  damage("meta.db", 14, 3);  // major version
  EXPECT_THROW(hpc::readMeta(dir / "meta.db"), std::runtime_error);
  EXPECT_NO_THROW(hpc::readMeta(dir / "out" / "meta.db"));
}

}  // namespace
