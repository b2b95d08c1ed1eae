// The source of csp-mem's *.cspmem files (reduce/src/sources/memory_profile_source.cpp): a
// valid file becomes a valid symbolic profile with the documented metrics; every defect is one
// ProfileError naming the file and the line.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_support.hpp"
#include "csp/metrics/memory_metrics.hpp"
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"

namespace {

namespace fs = std::filesystem;
namespace mm = csp::metrics::memory;

const char* kValid =
    "cspmem\t1\npid\t42\nthread\t1\nrank\t3\nexecutable\t/bin/app\narg\tx\ncell\t4\ninstructions\t900\n"
    "frame\t7\tmain\t/bin/app\tapp.c\t10\nframe\t9\twork\t/bin/app\tapp.c\t20\n"
    "node\t1\t0\t7\t\t0\nnode\t2\t1\t9\tapp.c\t12\n"
    "stat\t1\t1\t900\t30\t20\t5\t3\nstat\t2\t4\t600\t40\t16\t1\t0\n"
    "bin\t2\ttrms\t10\t4\t600\t200\nbin\t2\trms\t4\t4\t600\t200\n"
    "footprint\t90\t64\t100\t12\nwindows\t3\t2\t7\ninterleave\t90\t5\t3\ndegree\t2\t1\t4\n"
    "end\n";

fs::path write(const csp::test::TempDir& dir, const std::string& text) {
  const auto path = dir / "csp-mem.42.1.cspmem";
  std::ofstream(path) << text;
  return path;
}

std::uint64_t valueAt(const csp::ThreadProfile& p, std::size_t node, const std::string& metric) {
  for (std::size_t i = 0; i < p.values.size(); ++i)
    if (p.values.node[i] == node && p.metrics[p.values.metric[i]].name == metric) return p.values.count[i];
  return 0;
}

// The value of `metric` at the statement under the procedure frame `routine`.
std::uint64_t valueOf(const csp::ThreadProfile& p, const std::string& routine, const std::string& metric) {
  const auto frame = [&](std::size_t node) { return p.symbolicFrames[p.cct.frame[node]]; };
  for (std::size_t i = 0; i < p.values.size(); ++i) {
    const auto node = p.values.node[i];
    const auto proc = p.cct.parent[node];
    if (frame(node).scope == csp::ScopeKind::Stmt && frame(node).line != 0 &&
        frame(proc).scope == csp::ScopeKind::ProcFrame && p.strings[frame(proc).name] == routine &&
        p.metrics[p.values.metric[i]].name == metric)
      return p.values.count[i];
  }
  return 0;
}

TEST(MemorySource, ReadsAValidFile) {
  csp::test::TempDir dir("memsrc");
  const auto source = csp::reduce::memoryProfileSource();
  const auto file = write(dir, kValid);
  ASSERT_TRUE(source->isProfile(file));
  EXPECT_EQ(source->list(dir.path()), std::vector<std::string>{file.string()});
  const auto p = source->read(file);
  EXPECT_NO_THROW(csp::storage::validateProfile(p, file.string()));
  EXPECT_EQ(csp::formatIdTuple(p.identity.idTuple),
            csp::formatIdTuple({{csp::IdKind::Rank, 3}, {csp::IdKind::Thread, 1}}));
  // root; main and its entry statement; the call site, work and its entry statement; work's
  // two size bins; [footprint], its length-bin loop and the footprint-bin statement; the same
  // three for [interleaving]
  ASSERT_EQ(p.cct.size(), 14u);
  EXPECT_EQ(p.symbolicFrames[p.cct.frame[3]].scope, csp::ScopeKind::CallSite);
  EXPECT_EQ(p.symbolicFrames[p.cct.frame[3]].line, 12u);
  EXPECT_EQ(valueOf(p, "main", mm::kInstructions), 300u);  // 900 less its callee's 600
  EXPECT_EQ(valueOf(p, "work", mm::kInstructions), 600u);
  EXPECT_EQ(valueOf(p, "work", mm::kCalls), 4u);
  EXPECT_EQ(valueOf(p, "main", mm::kInducedKernel), 3u);
  const auto frameOf = [&](std::size_t node) { return p.symbolicFrames[p.cct.frame[node]]; };
  EXPECT_EQ(p.strings[frameOf(6).file], mm::kTrmsBinFile);
  EXPECT_EQ(frameOf(6).line, 10u);
  EXPECT_EQ(valueAt(p, 6, mm::kSizeMax), 200u);
  EXPECT_EQ(p.strings[frameOf(7).file], mm::kRmsBinFile);
  EXPECT_EQ(valueAt(p, 7, mm::kSizeCalls), 4u);
  EXPECT_EQ(frameOf(9).scope, csp::ScopeKind::Loop);
  EXPECT_EQ(frameOf(9).line, 3u);
  EXPECT_EQ(frameOf(10).line, 2u);
  EXPECT_EQ(valueAt(p, 10, mm::kWindows), 7u);
  EXPECT_EQ(p.strings[frameOf(13).file], mm::kDegreeBinFile);
  EXPECT_EQ(valueAt(p, 13, mm::kDegreeWindows), 4u);
}

// Format 2 (csp-mem since activation times): stat and bin lines carry the time, summed and
// largest, as the mem-time metrics; format 1 files (above) are still read.
const char* kVersion2 =
    "cspmem\t2\npid\t42\nthread\t0\nrank\t-\nexecutable\t/bin/app\ncell\t4\ninstructions\t900\n"
    "time\tthread-cpu-ns\nroutines\tprogram\nframe\t9\twork\t/bin/app\tapp.c\t20\nnode\t1\t0\t9\t\t0\n"
    "stat\t1\t4\t600\t40\t16\t1\t0\t5000\nbin\t1\ttrms\t10\t4\t600\t200\t5000\t3000\nend\n";

TEST(MemorySource, ReadsTheTimesOfFormat2) {
  csp::test::TempDir dir("memsrc2");
  const auto file = write(dir, kVersion2);
  const auto p = csp::reduce::memoryProfileSource()->read(file);
  EXPECT_NO_THROW(csp::storage::validateProfile(p, file.string()));
  EXPECT_EQ(valueOf(p, "work", mm::kTime), 5000u);
  EXPECT_EQ(valueOf(p, "work", mm::kCost), 600u);
  // root, work, its entry statement, its trms bin
  ASSERT_EQ(p.cct.size(), 4u);
  EXPECT_EQ(valueAt(p, 3, mm::kSizeTime), 5000u);
  EXPECT_EQ(valueAt(p, 3, mm::kSizeTimeMax), 3000u);
  EXPECT_EQ(valueAt(p, 3, mm::kSizeMax), 200u);
}

void expectDefect(const std::string& text, const std::string& defect) {
  csp::test::TempDir dir("memsrc-bad");
  const auto file = write(dir, text);
  try {
    (void)csp::reduce::memoryProfileSource()->read(file);
    ADD_FAILURE() << "no error for: " << defect;
  } catch (const csp::storage::ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(defect), std::string::npos) << e.what();
  }
}

TEST(MemorySource, RejectsDefectsWithOneClearError) {
  const std::string valid = kValid;
  expectDefect(valid.substr(0, valid.size() - 4), "truncated: no end line");
  expectDefect("cspmem\t1\nnode\t1\t0\t5\t\t0\nend\n", "line 2: frame 5 is not defined");
  expectDefect("cspmem\t1\nstat\t4\t1\t1\t1\t1\t0\t0\nend\n", "line 2: node 4 is not defined before");
  expectDefect("cspmem\t1\nframe\t1\tf\to\ts\tx\nend\n", "line 2: 'x' is not a number");
  expectDefect("hello\n", "not a csp-mem profile");
  expectDefect("cspmem\t1\nend\nend\n", "text after the end line");
  expectDefect("cspmem\t2\nstat\t1\t1\t1\t1\t1\t0\t0\nend\n", "line 2: 'stat' line has 8 fields, expected 9");
  expectDefect("cspmem\t3\nend\n", "not a csp-mem profile of format 1 or 2");
}

}  // namespace
