// csp-prof-mpi on profiles that csp-run recorded from a real optimized MPI program (no frame
// pointers): procedures, inlined code, loops and lines must come out of attribution right.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "common/test_support.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

std::uint32_t lineOf(const std::string& file, const std::string& needle) {
  std::ifstream in(file);
  std::string line;
  for (std::uint32_t n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  return 0;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(ProfMeasured, ProceduresInlinedScopesAndLinesOfAnOptimizedMpiProgram) {
  TempDir dir("prof-measured");
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-mpi-split";
  const std::string source = std::string(CSP_SOURCE_DIR) + "/tests/apps/mpi_split.cpp";
  const std::string kernel = std::string(CSP_SOURCE_DIR) + "/tests/apps/kernel.hpp";
  auto r = run(csp::test::mpirun(2) + tool("csp-run") + " -o " + (dir / "meas").string() + " -- " + app + " 30 1");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(csp::test::mpirun(2) + tool("csp-prof-mpi") + " " + (dir / "meas").string() + " -o " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto db = storage::Database::open(dir / "db");
  const auto& s = db->metadata().strings;

  const std::uint32_t heavyLine = lineOf(source, "double work_heavy(");
  const std::uint32_t lightLine = lineOf(source, "double work_light(");
  const std::uint32_t mainLine = lineOf(source, "int main(");
  const std::uint32_t spinFirst = lineOf(kernel, "inline double spin(");
  ASSERT_GT(heavyLine, 0u);
  std::map<std::string, std::uint64_t> inclusive;  // procedure -> summed inclusive value
  bool sawMain = false, sawHeavyAlien = false, sawLightAlien = false;
  std::size_t kernelStatements = 0, kernelLoops = 0;
  for (storage::NodeId id = 1; id < db->metadata().nodeCount; ++id) {
    const auto n = *db->node(id);
    if (n.kind == ScopeKind::ProcFrame && s[n.name] == "main" && endsWith(s[n.file], "tests/apps/mpi_split.cpp")) {
      EXPECT_EQ(n.line, mainLine);
      EXPECT_EQ(s[n.module], "csp-app-mpi-split");
      sawMain = true;
    }
    if (n.kind == ScopeKind::ProcFrame && (s[n.name] == "work_heavy" || s[n.name] == "work_light")) {
      const bool heavy = s[n.name] == "work_heavy";
      EXPECT_TRUE(endsWith(s[n.file], "tests/apps/mpi_split.cpp")) << s[n.file];
      EXPECT_EQ(n.line, heavy ? heavyLine : lightLine);
      EXPECT_EQ(db->node(n.parent)->kind, ScopeKind::CallSite);
      for (const auto& a : db->summaries(id))
        if (a.metric == 0 && a.scope == storage::MetricScope::Inclusive)
          inclusive[s[n.name]] += static_cast<std::uint64_t>(metrics::decodeIntAccumulator(a.bytes).sum());
      // The always-inlined kernel shows up as an Alien scope under its caller, at the call's line.
      for (auto child : db->children(id)) {
        const auto c = *db->node(child);
        if (c.kind != ScopeKind::Alien) continue;
        EXPECT_EQ(s[c.name], "csp_test::spin(unsigned long, double)");
        EXPECT_TRUE(endsWith(s[c.file], "tests/apps/mpi_split.cpp")) << s[c.file];
        EXPECT_EQ(c.line, heavy ? heavyLine : lightLine);
        (heavy ? sawHeavyAlien : sawLightAlien) = true;
        // The kernel's statements lie in its loop (recovered from the machine code, keyed by the
        // loop's first line), or directly in the inlined scope for code outside the loop.
        std::vector<storage::NodeId> leaves;
        for (auto below : db->children(child)) {
          const auto b = *db->node(below);
          if (b.kind != ScopeKind::Loop) {
            leaves.push_back(below);
            continue;
          }
          EXPECT_TRUE(endsWith(s[b.file], "tests/apps/kernel.hpp")) << s[b.file];
          EXPECT_EQ(b.line, spinFirst + 1);
          for (auto leaf : db->children(below)) leaves.push_back(leaf);
          ++kernelLoops;
        }
        for (auto leaf : leaves) {
          const auto l = *db->node(leaf);
          EXPECT_EQ(l.kind, ScopeKind::Stmt);
          EXPECT_TRUE(endsWith(s[l.file], "tests/apps/kernel.hpp")) << s[l.file];
          EXPECT_GT(l.line, spinFirst);
          EXPECT_LE(l.line, spinFirst + 5);
          ++kernelStatements;
        }
      }
    }
  }
  EXPECT_TRUE(sawMain);
  EXPECT_TRUE(sawHeavyAlien);
  EXPECT_TRUE(sawLightAlien);
  EXPECT_GT(kernelStatements, 0u);
  EXPECT_GT(kernelLoops, 0u);
  // The program splits its work 2:1 between the two procedures.
  ASSERT_GT(inclusive["work_light"], 0u);
  const double ratio = static_cast<double>(inclusive["work_heavy"]) / static_cast<double>(inclusive["work_light"]);
  EXPECT_GT(ratio, 1.6);  // sampling noise on a loaded 2-core machine; the exact check is in the measurement tests
  EXPECT_LT(ratio, 2.5);
}

}  // namespace
