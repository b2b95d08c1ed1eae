// Loops on measured data: csp-run samples tests/apps/loops.cpp built at -O2 and -O3, csp-prof-mpi
// reduces the profiles with loop recovery. Samples must land in the right loops (found by the
// LOOP-... markers of the source, not by line numbers written here), loops must nest with
// inlined code as the program does, the exclusive/inclusive rules of thesis Fig. 7.5 must hold
// for every loop, the Flat and Callers views must show them, the database must not depend on
// the process count, and the structure cache must be hit, rebuilt when damaged, never stale.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <regex>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace fs = std::filesystem;

namespace {

const std::string kSource = std::string(CSP_SOURCE_DIR) + "/tests/apps/loops.cpp";

std::string app(const std::string& opt) { return std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-loops-" + opt; }

std::uint32_t lineOf(const std::string& needle) {
  std::ifstream in(kSource);
  std::string line;
  for (std::uint32_t n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  ADD_FAILURE() << needle << " not in " << kSource;
  return 0;
}
std::uint32_t marker(const std::string& name) { return lineOf("// " + name); }

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One measurement per optimization level, shared by the tests of a ctest run (about 1.5-2.5 s of
// CPU each, sampled at 1000/s: a few hundred samples per kernel; csp::test::sharedInput).
struct Measured {
  fs::path meas, db;
  explicit Measured(const std::string& opt) {
    const auto dir = csp::test::sharedInput("loops-measured-" + opt, [&](const fs::path& d) {
      auto r = run("timeout -k 5 120 " + tool("csp-run") + " -e cpu-time@1000 -o " + (d / "meas").string() + " -- " +
                   app(opt) + " all 6");
      EXPECT_EQ(r.status, 0) << r.output;
      if (r.status != 0) return false;
      r = run(tool("csp-prof-mpi") + " -q " + (d / "meas").string() + " -o " + (d / "db").string());
      EXPECT_EQ(r.status, 0) << r.output;
      return r.status == 0;
    });
    meas = dir / "meas";
    db = dir / "db";
  }
};

const Measured& measured(const std::string& opt) {
  static std::map<std::string, std::unique_ptr<Measured>> runs;
  auto& m = runs[opt];
  if (!m) m = std::make_unique<Measured>(opt);
  return *m;
}

// The whole tree with metric 0's summed exclusive and inclusive values.
struct Tree {
  struct Node {
    storage::NodeId parent = 0;
    ScopeKind kind = ScopeKind::Root;
    std::string name, file;
    std::uint32_t line = 0;
    std::int64_t e = 0, i = 0;
    std::vector<storage::NodeId> children;
  };
  std::vector<Node> nodes;

  explicit Tree(const fs::path& dir) {
    auto db = storage::Database::open(dir);
    const auto& s = db->metadata().strings;
    nodes.resize(db->metadata().nodeCount);
    for (storage::NodeId id = 0; id < nodes.size(); ++id) {
      const auto n = *db->node(id);
      auto& x = nodes[id];
      x.parent = n.parent;
      x.kind = n.kind;
      x.name = s[n.name];
      x.file = s[n.file];
      x.line = n.line;
      if (id != 0) nodes[n.parent].children.push_back(id);
      for (const auto& a : db->summaries(id)) {
        if (a.metric != 0) continue;
        const auto sum = static_cast<std::int64_t>(metrics::decodeIntAccumulator(a.bytes).sum());
        (a.scope == storage::MetricScope::Inclusive ? x.i : x.e) = sum;
      }
    }
  }

  std::vector<storage::NodeId> procedures(const std::string& name) const {
    std::vector<storage::NodeId> out;
    for (storage::NodeId id = 0; id < nodes.size(); ++id)
      if (nodes[id].kind == ScopeKind::ProcFrame && nodes[id].name.find(name) != std::string::npos) out.push_back(id);
    return out;
  }

  // Scopes between `top` (exclusive) and `id` (exclusive): "loop:LINE", "inlined@LINE", "call@LINE".
  std::vector<std::string> between(storage::NodeId top, storage::NodeId id) const {
    std::vector<std::string> out;
    for (auto p = nodes[id].parent; p != top && p != 0; p = nodes[p].parent) {
      const auto& n = nodes[p];
      const char* what = n.kind == ScopeKind::Loop       ? "loop:"
                         : n.kind == ScopeKind::Alien    ? "inlined@"
                         : n.kind == ScopeKind::CallSite ? "call@"
                                                         : "?";
      out.insert(out.begin(), what + std::to_string(n.line));
    }
    return out;
  }

  // Statements below a node (not behind another procedure frame).
  template <typename F>
  void statements(storage::NodeId from, F&& f) const {
    std::vector<storage::NodeId> stack{from};
    while (!stack.empty()) {
      const auto id = stack.back();
      stack.pop_back();
      if (nodes[id].kind == ScopeKind::Stmt) f(id);
      if (nodes[id].kind == ScopeKind::CallSite) continue;
      for (auto c : nodes[id].children) stack.push_back(c);
    }
  }
};

std::string loopTag(std::uint32_t line) { return "loop:" + std::to_string(line); }

bool isPrefix(const std::vector<std::string>& a, const std::vector<std::string>& full) {
  return a.size() <= full.size() && std::equal(a.begin(), a.end(), full.begin());
}

class LoopsMeasured : public ::testing::TestWithParam<std::string> {};

TEST_P(LoopsMeasured, SamplesLandInTheirLoops) {
  const Tree t(measured(GetParam()).db);
  struct Kernel {
    std::string procedure;
    std::vector<std::string> nest;  // scopes from the procedure to its innermost loop
  };
  const std::vector<Kernel> kernels{
      {"triple", {loopTag(marker("LOOP-I")), loopTag(marker("LOOP-J")), loopTag(marker("LOOP-K"))}},
      {"repeatSmooth",
       {loopTag(marker("LOOP-REPS")), "inlined@" + std::to_string(marker("CALL-SMOOTH")),
        loopTag(marker("LOOP-INLINED"))}},
      {"saxpy", {loopTag(marker("LOOP-SAXPY"))}},
      {"findFirst", {loopTag(marker("LOOP-SEARCH"))}},
  };
  for (const auto& k : kernels) {
    const auto procs = t.procedures(k.procedure);
    ASSERT_EQ(procs.size(), 1u) << k.procedure;
    const auto proc = procs[0];
    EXPECT_TRUE(endsWith(t.nodes[proc].file, "tests/apps/loops.cpp")) << t.nodes[proc].file;
    std::int64_t innermost = 0, all = 0;
    t.statements(proc, [&](storage::NodeId s) {
      const auto path = t.between(proc, s);
      // Every sample of the kernel lies in its loop nest (or in the part of it around the
      // statement's code), never in another loop.
      EXPECT_TRUE(isPrefix(path, k.nest))
          << k.procedure << ": " << fmt::format("{}", fmt::join(path, " > ")) << " line " << t.nodes[s].line;
      all += t.nodes[s].i;
      if (path == k.nest) innermost += t.nodes[s].i;
    });
    ASSERT_GT(all, 0) << k.procedure;
    // Nearly all the time of these kernels is spent in their innermost loop; half is a bound
    // that sampling noise cannot break at a few hundred samples.
    EXPECT_GT(innermost * 2, all) << k.procedure << ": " << innermost << " of " << all;
  }
}

TEST_P(LoopsMeasured, ExclusiveAndInclusiveFollowFigure75) {
  const Tree t(measured(GetParam()).db);
  std::size_t loops = 0, loopsWithOwnWork = 0, loopsWithInnerWork = 0;
  for (storage::NodeId id = 0; id < t.nodes.size(); ++id) {
    const auto& x = t.nodes[id];
    std::int64_t childI = 0, stmtChildE = 0;
    for (auto c : x.children) {
      childI += t.nodes[c].i;
      if (t.nodes[c].kind == ScopeKind::Stmt) stmtChildE += t.nodes[c].e;
    }
    switch (x.kind) {
      case ScopeKind::Stmt:
        EXPECT_TRUE(x.children.empty());
        EXPECT_EQ(x.e, x.i);
        break;
      case ScopeKind::CallSite:
        EXPECT_EQ(x.e, 0);
        EXPECT_EQ(x.i, childI);
        break;
      case ScopeKind::Loop:
        ++loops;
        loopsWithOwnWork += x.e > 0;
        loopsWithInnerWork += x.e < x.i;
        [[fallthrough]];
      case ScopeKind::Alien:
        EXPECT_EQ(x.e, stmtChildE) << "node " << id << " line " << x.line;  // static: its own statements
        EXPECT_EQ(x.i, childI) << "node " << id << " line " << x.line;
        break;
      case ScopeKind::ProcFrame: {
        std::int64_t dynamic = 0;  // statements not behind a call site, through loops and inlined code
        t.statements(id, [&](storage::NodeId s) { dynamic += t.nodes[s].e; });
        EXPECT_EQ(x.e, dynamic) << x.name;
        EXPECT_EQ(x.i, childI) << x.name;
        break;
      }
      case ScopeKind::Root:
        EXPECT_EQ(x.i, childI);
        break;
    }
  }
  EXPECT_GE(loops, 7u);
  // Innermost loops have statements of their own (E > 0); outer loops have loops or inlined
  // code inside whose statements are not theirs (E < I).
  EXPECT_GE(loopsWithOwnWork, 4u);
  EXPECT_GE(loopsWithInnerWork, 3u);
}

TEST_P(LoopsMeasured, FlatAndCallersViews) {
  const auto& m = measured(GetParam());
  // Flat: module > file > triple > loop I > loop J > loop K, each one level deeper.
  auto r = run(tool("csp-views") + " --flat -t 0 --keep '*triple*' --no-color " + m.db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<std::size_t> indent;
  for (const auto& name : {"LOOP-I", "LOOP-J", "LOOP-K"}) {
    const std::string label = "loop  loops.cpp:" + std::to_string(marker(name)) + " ";
    const auto at = r.output.find(label);
    ASSERT_NE(at, std::string::npos) << label << "\n" << r.output;
    indent.push_back(at - (r.output.rfind('\n', at) + 1));
  }
  EXPECT_LT(indent[0], indent[1]);
  EXPECT_LT(indent[1], indent[2]);
  // Flat: the loop of the inlined procedure lies below the inlined scope, below the caller's loop.
  r = run(tool("csp-views") + " --flat -t 0 --keep '*repeatSmooth*' --no-color " + m.db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto reps = r.output.find("loop  loops.cpp:" + std::to_string(marker("LOOP-REPS")) + " ");
  const auto inl = r.output.find("[inlined] smooth");
  const auto inner = r.output.find("loop  loops.cpp:" + std::to_string(marker("LOOP-INLINED")) + " ");
  ASSERT_NE(reps, std::string::npos) << r.output;
  ASSERT_NE(inl, std::string::npos) << r.output;
  ASSERT_NE(inner, std::string::npos) << r.output;
  EXPECT_LT(reps, inl);
  EXPECT_LT(inl, inner);
  // Callers: loops are no callers; triple is called from main (runTriple is inlined into it) at
  // the call inside runTriple's loop.
  r = run(tool("csp-views") + " --callers -t 0 --keep '*triple*' --no-color " + m.db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("<- main  at loops.cpp:" + std::to_string(lineOf("triple(a.data(), c.data(), n)"))),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("loop  "), std::string::npos) << r.output;
}

TEST_P(LoopsMeasured, SameDatabaseForAnyProcessCount) {
  const auto& m = measured(GetParam());
  TempDir dir("loops-np");
  const auto db3 = dir / "db-np3";
  auto r = run(csp::test::mpirun(3) + tool("csp-prof-mpi") + " -q -j 1 --batch 1 " + m.meas.string() + " -o " +
               db3.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto db1 = dir / "db-np1";
  r = run(tool("csp-prof-mpi") + " -q -j 2 --batch 1 " + m.meas.string() + " -o " + db1.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(csp::test::dumpDatabase(db1) == csp::test::dumpDatabase(db3));
}

INSTANTIATE_TEST_SUITE_P(OptimizationLevels, LoopsMeasured, ::testing::Values("O2", "O3"));

// ---------------------------------------------------------------------------------------------
// The structure cache, end to end

struct StructureLine {
  int modules = -1, analysed = -1, cached = -1;
};

StructureLine structureLine(const std::string& output) {
  static const std::regex re(R"(structure: (\d+) modules, (\d+) analysed in [0-9.]+ s, (\d+) from the cache)");
  std::smatch m;
  StructureLine s;
  if (std::regex_search(output, m, re)) {
    s.modules = std::stoi(m[1]);
    s.analysed = std::stoi(m[2]);
    s.cached = std::stoi(m[3]);
  }
  return s;
}

std::size_t countOf(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<fs::path> entries(const fs::path& cache) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(cache))
    if (e.path().extension() == ".cspstruct") out.push_back(e.path());
  return out;
}

bool hasLoopsOf(const fs::path& db, const std::string& file) {
  const Tree t(db);
  for (const auto& n : t.nodes)
    if (n.kind == ScopeKind::Loop && endsWith(n.file, file)) return true;
  return false;
}

class StructureCacheRun : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto r = run(tool("csp-run") + " -o " + meas.string() + " -- " + app("O2") + " search 2");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  csp::test::RunResult prof(const std::string& out, const std::string& options = "") {
    fs::remove_all(dir / out);
    const std::string where =
        options.find("--structure-cache") == std::string::npos ? " --structure-cache " + cache.string() : "";
    return run(tool("csp-prof-mpi") + where + " " + options + " " + meas.string() + " -o " + (dir / out).string());
  }
  TempDir dir{"structure-cache-run"};
  fs::path meas = dir / "meas", cache = dir / "cache";
};

TEST_F(StructureCacheRun, SecondRunHitsTheCacheAndGivesTheSameDatabase) {
  auto r = prof("db1");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto first = structureLine(r.output);
  EXPECT_GE(first.modules, 2) << r.output;  // the program and libc at least
  EXPECT_EQ(first.analysed, first.modules) << r.output;
  EXPECT_EQ(first.cached, 0) << r.output;
  EXPECT_EQ(entries(cache).size(), static_cast<std::size_t>(first.modules));
  r = prof("db2");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto second = structureLine(r.output);
  EXPECT_EQ(second.analysed, 0) << r.output;
  EXPECT_EQ(second.cached, first.modules) << r.output;
  EXPECT_TRUE(csp::test::dumpDatabase(dir / "db1") == csp::test::dumpDatabase(dir / "db2"));
  EXPECT_TRUE(hasLoopsOf(dir / "db2", "tests/apps/loops.cpp"));
  // Without a cache, the same database too.
  r = prof("db3", "--structure-cache off");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("from the cache (none)"), std::string::npos) << r.output;
  EXPECT_TRUE(csp::test::dumpDatabase(dir / "db1") == csp::test::dumpDatabase(dir / "db3"));
  // --no-loops: no analysis, no loops.
  r = prof("db4", "--no-loops");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("structure:"), std::string::npos) << r.output;
  EXPECT_FALSE(hasLoopsOf(dir / "db4", "tests/apps/loops.cpp"));
}

TEST_F(StructureCacheRun, ConcurrentProcessesAnalyseEachModuleOnce) {
  // Three csp-prof-mpi at once on an empty cache (as the ranks of a job on one host): each module
  // is analysed by one of them, the others wait for its entry; the databases are the same.
  std::vector<std::future<csp::test::RunResult>> runs;
  for (int i = 0; i < 3; ++i)
    runs.push_back(std::async(std::launch::async, [this, i] { return prof("db" + std::to_string(i)); }));
  int analysed = 0, modules = -1;
  for (auto& f : runs) {
    const auto r = f.get();
    ASSERT_EQ(r.status, 0) << r.output;
    const auto line = structureLine(r.output);
    EXPECT_EQ(line.analysed + line.cached, line.modules) << r.output;
    analysed += line.analysed;
    modules = line.modules;
    EXPECT_EQ(r.output.find("structure cache"), std::string::npos) << r.output;  // no cache warning
  }
  EXPECT_EQ(analysed, modules);
  EXPECT_EQ(entries(cache).size(), static_cast<std::size_t>(modules));
  for (const auto& e : fs::directory_iterator(cache)) EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
  const auto first = csp::test::dumpDatabase(dir / "db0");
  EXPECT_TRUE(first == csp::test::dumpDatabase(dir / "db1"));
  EXPECT_TRUE(first == csp::test::dumpDatabase(dir / "db2"));
}

TEST_F(StructureCacheRun, DamagedOrTruncatedEntriesAreRebuilt) {
  auto r = prof("db1");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto modules = structureLine(r.output).modules;
  for (const bool truncate : {false, true}) {
    for (const auto& e : entries(cache)) {
      std::string bytes;
      {
        std::ifstream in(e, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
      }
      if (truncate)
        bytes.resize(bytes.size() / 2);
      else
        bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
      std::ofstream(e, std::ios::binary | std::ios::trunc) << bytes;
    }
    r = prof("db2");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(countOf(r.output, "is damaged"), static_cast<std::size_t>(modules)) << r.output;
    EXPECT_EQ(structureLine(r.output).analysed, modules) << r.output;
    EXPECT_TRUE(csp::test::dumpDatabase(dir / "db1") == csp::test::dumpDatabase(dir / "db2"));
    // Rewritten: the next run reads them all.
    r = prof("db3");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(structureLine(r.output).cached, modules) << r.output;
    EXPECT_EQ(r.output.find("structure cache"), std::string::npos) << r.output;  // no cache warning
  }
}

TEST_F(StructureCacheRun, ChangedBinaryIsNeverServedAStaleEntry) {
  // A program without a build-id: its entry is keyed by path, size and modification time. The
  // same path then holds another build of the program (-O3 instead of -O2).
  const auto bin = dir / "bin", program = bin / "loops";
  fs::create_directories(bin);
  auto r = run("objcopy --remove-section .note.gnu.build-id " + app("O2") + " " + program.string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto measureAndReduce = [&](const std::string& tag) {
    const auto m = dir / ("meas-" + tag);
    auto x = run(tool("csp-run") + " -o " + m.string() + " -- " + program.string() + " triple 3");
    EXPECT_EQ(x.status, 0) << x.output;
    fs::remove_all(dir / ("db-" + tag));
    return run(tool("csp-prof-mpi") + " --structure-cache " + cache.string() + " " + m.string() + " -o " +
               (dir / ("db-" + tag)).string());
  };
  r = measureAndReduce("first");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto first = structureLine(r.output);
  EXPECT_EQ(first.analysed, first.modules) << r.output;
  r = measureAndReduce("again");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(structureLine(r.output).analysed, 0) << r.output;
  // Rebuilt in place.
  r = run("objcopy --remove-section .note.gnu.build-id " + app("O3") + " " + program.string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = measureAndReduce("rebuilt");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rebuilt = structureLine(r.output);
  EXPECT_EQ(rebuilt.analysed, 1) << r.output;  // the program; libc from the cache
  EXPECT_EQ(rebuilt.cached, rebuilt.modules - 1) << r.output;
  // And its loops are the rebuilt program's: the triple nest in place.
  const Tree t(dir / "db-rebuilt");
  const auto procs = t.procedures("triple");
  ASSERT_EQ(procs.size(), 1u);
  bool full = false;
  t.statements(procs[0], [&](storage::NodeId s) {
    full =
        full || t.between(procs[0], s) == std::vector<std::string>{loopTag(marker("LOOP-I")), loopTag(marker("LOOP-J")),
                                                                   loopTag(marker("LOOP-K"))};
  });
  EXPECT_TRUE(full);
}

TEST_F(StructureCacheRun, UnanalysableModulesKeepTheirProceduresWithoutLoops) {
  // The measured program replaced (--replace-path) by: another architecture's ELF (e_machine
  // patched), a truncated copy, a text file. Each gets a warning naming it; the run goes on.
  const auto original = fs::path(app("O2"));
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> make;
  };
  const std::vector<Case> cases{
      {"foreign",
       [&](const fs::path& p) {
         fs::copy_file(original, p);
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(18);
         const char aarch64[2] = {static_cast<char>(183), 0};
         f.write(aarch64, 2);
       }},
      {"truncated",
       [&](const fs::path& p) {
         fs::copy_file(original, p);
         fs::resize_file(p, fs::file_size(p) * 2 / 5);
       }},
      {"text", [&](const fs::path& p) { std::ofstream(p) << "not a program\n"; }},
  };
  for (const auto& c : cases) {
    const auto alt = dir / ("alt-" + c.name);
    fs::create_directories(alt);
    c.make(alt / original.filename());
    const auto r = prof("db-" + c.name, "--replace-path " + original.parent_path().string() + "=" + alt.string());
    ASSERT_EQ(r.status, 0) << c.name << "\n" << r.output;
    EXPECT_NE(r.output.find("warning: " + (alt / original.filename()).string()), std::string::npos) << c.name << "\n"
                                                                                                    << r.output;
    EXPECT_FALSE(hasLoopsOf(dir / ("db-" + c.name), "tests/apps/loops.cpp")) << c.name;
    if (c.name == "foreign") {
      EXPECT_NE(r.output.find("no loops recovered: machine code of ELF machine 183"), std::string::npos) << r.output;
      // DWARF still names the procedures.
      EXPECT_EQ(Tree(dir / ("db-" + c.name)).procedures("findFirst").size(), 1u);
    }
  }
}

}  // namespace
