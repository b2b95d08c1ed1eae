// HPCToolkit measurements (*.hpcrun, format 4.0) as an input of csp-prof-mpi
// (reduce/src/sources/hpcrun_profile_source.cpp): files written by the tests' own writer
// (hpcrun_writer.hpp, from the format's description), read by the source in process, then run
// through the real csp-prof-mpi (1 to 4 processes) into databases whose values, statistics and
// diffs are checked exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "common/address_space_cap.hpp"
#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/reduce/attribution.hpp"
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_io.hpp"
#include "reduce/hpcrun_writer.hpp"

namespace {

using namespace csp;
using csp::test::AddressSpaceCap;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
namespace fs = std::filesystem;
namespace hr = csp::test::hpcrun;

constexpr const char* kGoneApp = "/nonexistent/hpcrun-test/app";
constexpr const char* kGoneLib = "/nonexistent/hpcrun-test/libgone.so";

// The offset of `symbol` in the test binary csp_attr_sample (its ELF virtual address: what hpcrun
// records as a module-relative ip), from nm.
std::uint64_t symbolOffset(const std::string& binary, const std::string& symbol) {
  const auto r = run("nm " + binary + " | grep ' " + symbol + "$'");
  return r.status == 0 ? std::stoull(r.output.substr(0, r.output.find(' ')), nullptr, 16) : 0;
}
std::string sampleBinary() { return std::string(CSP_BINARY_DIR) + "/tests/reduce/csp_attr_sample"; }

// Thread k (= 2 x rank + thread) of the test run. Paths: the program root, its fence, then
// app 0x1000 -> app 0x2000 -> {leaf app 0x3000; leaf libgone 0x500; no-activity placeholder;
// app 0x2000 (recursion) -> leaf app 0x3000; leaf sample::accumulate}; a partial unwind
// (^Partial -> leaf app 0x3000). Real CPU time in dyadic fractions (exact sums in any order) and
// integer cycles.
double cpu(std::uint32_t node, int k) {
  switch (node) {
    case 10:
      return 0.5 * (k + 1);
    case 12:
      return 0.25;
    case 16:
      return 0.125;
    case 18:
      return 1.0;
    case 22:
      return 0.75;
    case 24:
      return 0.0625 * (k + 1);
  }
  return 0;
}
std::uint64_t cycles(std::uint32_t node, int k) {
  switch (node) {
    case 10:
      return 3000000ull * (k + 1);
    case 12:
      return 1000000;
    case 22:
      return 2000000;
    case 24:
      return 5000000;
  }
  return 0;
}
constexpr std::uint32_t kValued[] = {10, 12, 16, 18, 22, 24};

hr::Profile threadProfile(int rank, int thread, std::uint64_t accumulate) {
  const int k = 2 * rank + thread;
  hr::Profile p;
  p.header = {{"program-name", "app"}, {"process-id", std::to_string(4000 + rank)}, {"host-id", "a1b2"}};
  p.loadmap = {{1, kGoneApp}, {2, sampleBinary()}, {3, kGoneLib}};
  p.metrics = {{"CPUTIME (sec)", true, 5000000, "CPU time"}, {"CYCLES", false, 1000000, "cycles"}};
  p.nodes = {{2, 0, 0, hr::kPrimary},     {4, 2, 0, thread == 0 ? hr::kMainFence : hr::kThreadFence},
             {6, 4, 1, 0x1000},           {8, 6, 1, 0x2000},
             {10, 8, 1, 0x3000},          {12, 8, 3, 0x500},
             {14, 0, 0, hr::kPartial},    {16, 14, 1, 0x3000},
             {18, 8, 0, hr::kNoActivity}, {20, 8, 1, 0x2000},
             {22, 20, 1, 0x3000},         {24, 8, 2, accumulate + 4}};
  // hpcrun writes its nodes in no particular order: children before parents here.
  std::reverse(p.nodes.begin() + 2, p.nodes.end());
  p.idTuple = {{hr::Node, 0xa1b2, 0},
               {hr::Rank, std::uint64_t(rank), std::uint64_t(rank)},
               {hr::Thread, std::uint64_t(thread), std::uint64_t(thread)}};
  for (std::uint32_t n : kValued) {
    if (cpu(n, k) != 0) p.values.push_back({n, 0, hr::real(cpu(n, k))});
    if (cycles(n, k) != 0) p.values.push_back({n, 1, cycles(n, k)});
  }
  return p;
}

// A measurement directory of 2 ranks x 2 threads, plus a trace file the source ignores.
fs::path measurement(const fs::path& dir) {
  const auto meas = dir / "hpctoolkit-app-measurements";
  fs::create_directories(meas);
  const auto accumulate = symbolOffset(sampleBinary(), "_ZN6sample10accumulateEi");
  EXPECT_NE(accumulate, 0u) << "nm found no sample::accumulate in " << sampleBinary();
  for (int rank = 0; rank < 2; ++rank)
    for (int thread = 0; thread < 2; ++thread) {
      const auto name = "app-00000" + std::to_string(rank) + "-00" + std::to_string(thread) + "-a1b2-" +
                        std::to_string(4000 + rank) + "-0.hpcrun";
      hr::write(threadProfile(rank, thread, accumulate), meas / name);
    }
  std::ofstream(meas / "app-000000-000-a1b2-4000-0.hpctrace") << "trace";
  return meas;
}

ThreadProfile readOne(const hr::Profile& p, const fs::path& file) {
  hr::write(p, file);
  return reduce::hpcrunProfileSource()->read(file);
}

std::string readError(const std::string& bytes, const fs::path& file) {
  hr::writeBytes(bytes, file);
  try {
    reduce::hpcrunProfileSource()->read(file);
  } catch (const storage::ProfileError& e) {
    return e.what();
  }
  return "(read without error)";
}

// ---- the source, in process ----

TEST(HpcrunSource, ReadsIdentityMetricsLoadMapAndCctWithItsRoots) {
  TempDir dir("hpcrun-read");
  const auto p = readOne(threadProfile(1, 1, 0x400), dir / "t.hpcrun");
  EXPECT_NO_THROW(storage::validateProfile(p, "t.hpcrun"));
  EXPECT_EQ(p.identity.idTuple, (IdTuple{{IdKind::Node, 0}, {IdKind::Rank, 1}, {IdKind::Thread, 1}}));
  EXPECT_EQ(p.identity.pid, 4001u);
  EXPECT_EQ(p.identity.executable, "app");
  ASSERT_EQ(p.metrics.size(), 2u);
  EXPECT_EQ(p.metrics[0].valueType, ValueType::Real);
  EXPECT_EQ(p.metrics[0].unit, "s");
  EXPECT_EQ(p.metrics[1].valueType, ValueType::Count);
  EXPECT_EQ(p.metrics[1].period, 1u) << "hpcrun's values are already count x period";
  EXPECT_NE(p.metrics[1].description.find("period 1000000"), std::string::npos);
  ASSERT_EQ(p.frameKind, FrameKind::Address);
  // The roots and the fence are no frames: 12 hpcrun nodes - 3, plus CSP's root.
  ASSERT_EQ(p.cct.size(), 10u);
  ASSERT_EQ(p.cct.pathStart.size(), p.cct.size());
  std::vector<PathStart> rootChildren;
  for (std::size_t i = 1; i < p.cct.size(); ++i)
    if (p.cct.parent[i] == 0) rootChildren.push_back(p.cct.pathStart[i]);
  EXPECT_EQ(rootChildren, (std::vector<PathStart>{PathStart::Complete, PathStart::Partial}));
  // The placeholder is a module of its own; the load map's modules keep their paths.
  ASSERT_EQ(p.modules.size(), 4u);
  EXPECT_EQ(p.modules[0].path, kGoneApp);
  EXPECT_EQ(p.modules[3].path, "[placeholder NoActvty]");
  // Values: 6 valued nodes, 10 values, the real ones bit for bit.
  EXPECT_EQ(p.values.size(), 10u);
  double total = 0;
  for (std::size_t i = 0; i < p.values.size(); ++i)
    if (p.values.metric[i] == 0) total += realValue(p.values.count[i]);
  EXPECT_EQ(total, 0.5 * 4 + 0.25 + 0.125 + 1.0 + 0.75 + 0.0625 * 4);
}

TEST(HpcrunSource, SparseNodeIdsGiveTheSameProfile) {
  TempDir dir("hpcrun-sparse");
  auto sparse = threadProfile(1, 0, 0x400);
  for (auto& n : sparse.nodes) {
    n.id *= 100003;
    n.parent *= 100003;
  }
  for (auto& v : sparse.values) v.node *= 100003;
  EXPECT_EQ(readOne(sparse, dir / "s.hpcrun"), readOne(threadProfile(1, 0, 0x400), dir / "d.hpcrun"));
}

// CSP's node order is depth first, siblings in file order, whatever order the file lists the
// nodes in otherwise: parents first (as hpcrun writes them; read in passes over the file) or
// children first (read by a walk from the roots) give one profile.
TEST(HpcrunSource, AnyOrderOfTheNodesGivesTheSameProfile) {
  TempDir dir("hpcrun-node-order");
  auto p = threadProfile(0, 1, 0x400);
  std::mt19937 rng(7);
  const std::uint32_t fence = 4, partial = 14;
  for (std::uint32_t i = 0; i < 3000; ++i) {  // a random tree below both roots, placeholders too
    const std::uint32_t id = 100 + 2 * i;
    const std::uint32_t parent = i < 2 ? (i == 0 ? fence : partial) : 100 + 2 * (rng() % i);
    const bool placeholder = rng() % 50 == 0;
    p.nodes.push_back({id, parent, std::uint16_t(placeholder ? 0 : 1 + rng() % 3),
                       placeholder ? hr::kNoActivity : 0x100 + 4 * (rng() % 500)});
    if (rng() % 3 == 0) p.values.push_back({id, 0, hr::real(0.5)});
    if (rng() % 3 == 0) p.values.push_back({id, 1, 3});
  }
  auto parentsFirst = p;
  std::sort(parentsFirst.nodes.begin(), parentsFirst.nodes.end(),
            [](const hr::CctNode& a, const hr::CctNode& b) { return a.id < b.id; });  // parents have smaller ids
  // Deepest first, siblings in the same order (the order among siblings is the CSP order's).
  std::map<std::uint32_t, std::uint32_t> parentOf, depth;
  for (const auto& n : p.nodes) parentOf[n.id] = n.parent;
  for (const auto& n : p.nodes)
    for (std::uint32_t a = n.id; a != 0; a = parentOf[a]) ++depth[n.id];
  auto childrenFirst = parentsFirst;
  std::stable_sort(childrenFirst.nodes.begin(), childrenFirst.nodes.end(),
                   [&](const hr::CctNode& a, const hr::CctNode& b) { return depth[a.id] > depth[b.id]; });
  const auto first = readOne(parentsFirst, dir / "f.hpcrun");
  EXPECT_NO_THROW(storage::validateProfile(first, "f.hpcrun"));
  EXPECT_EQ(first.cct.size(), 1u + 12 - 3 + 3000);
  EXPECT_EQ(readOne(childrenFirst, dir / "c.hpcrun"), first);
  // hpcrun's own layout, a preorder (read in one pass), with the node index in its order, by id
  // or split, gives the same profile.
  auto preorder = parentsFirst;
  preorder.nodes = hr::inPreorder(parentsFirst.nodes);
  ASSERT_NE(preorder.nodes, parentsFirst.nodes);
  for (const auto index : {hr::Profile::Index::CctOrder, hr::Profile::Index::ById, hr::Profile::Index::AsListed}) {
    preorder.index = index;
    EXPECT_EQ(readOne(preorder, dir / "p.hpcrun"), first) << static_cast<int>(index);
  }
}

// Defects of a file in hpcrun's own layout (a preorder, read in one pass) are named as in any
// other: the pass gives up and the general conversion names them.
TEST(HpcrunSource, DamagedPreorderFilesGetTheSameErrors) {
  TempDir dir("hpcrun-bad-preorder");
  auto p = threadProfile(0, 0, 0x400);
  p.nodes = hr::inPreorder(p.nodes);
  const auto file = dir / "bad.hpcrun";
  auto expectError = [&](const hr::Profile& bad, const std::string& defect) {
    const auto message = readError(hr::encode(bad), file);
    EXPECT_NE(message.find(file.string() + ": " + defect), std::string::npos) << message;
  };
  auto twice = p;
  twice.nodes.push_back({10, 8, 1, 0x10});
  expectError(twice, "CCT: node id 10 appears twice");
  auto unmapped = p;
  unmapped.nodes.back().module = 9;
  expectError(unmapped, "CCT: node");
  auto orphan = p;
  orphan.nodes.push_back({40, 99, 1, 0x10});
  expectError(orphan, "CCT: node 40 has parent 99, which does not exist");
  auto badMetric = p;
  badMetric.values.push_back({10, 5, 1});
  expectError(badMetric, "metric values: metric 5 at node 10 is not in the metric table");
  auto metricTwice = p;
  metricTwice.values.push_back({12, 1, 7});
  expectError(metricTwice, "metric values: metric 1 appears twice at one node");
  auto notInCct = p;
  notInCct.values.push_back({77, 1, 7});
  expectError(notInCct, "metric values: node 77 is not in the CCT");
  EXPECT_EQ(readOne(p, dir / "good.hpcrun"), readOne(threadProfile(0, 0, 0x400), dir / "reversed.hpcrun"));
  // Any byte of the file set to 0, 0x80 or 0xff: a profile or one ProfileError, nothing else, and
  // no table sized by a count the file cannot hold (the address space is capped at 1 GiB: the
  // counts of header entries, load modules and metrics were once trusted; where the damaged byte
  // fell depended on the length of the binary's path).
  const std::string good = hr::encode(p);
  const AddressSpaceCap cap(std::size_t{1} << 30);
  for (std::size_t at = 0; at < good.size(); ++at)
    for (const unsigned char value : {0x00, 0x80, 0xff}) {
      std::string bytes = good;
      bytes[at] = static_cast<char>(value);
      hr::writeBytes(bytes, file);
      try {
        reduce::hpcrunProfileSource()->read(file);
      } catch (const storage::ProfileError& e) {
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << at << " set to " << int(value) << ": " << e.what();
      }
    }
}

// The source keeps its buffers per thread from one profile to the next: a profile read after
// larger, smaller and damaged ones is the one a fresh thread reads.
TEST(HpcrunSource, EachProfileReadInTurnIsTheOneAFreshThreadReads) {
  TempDir dir("hpcrun-turn");
  auto big = threadProfile(1, 1, 0x400);
  for (std::uint32_t i = 0; i < 2000; ++i) {  // a chain below node 22, every other node valued
    big.nodes.push_back({100 + 2 * i, i == 0 ? 22u : 98 + 2 * i, 1, 0x4000 + 4 * i});
    if (i % 2 == 0) big.values.push_back({100 + 2 * i, 1, i + 1});
  }
  auto sparse = threadProfile(0, 1, 0x400);
  for (auto& n : sparse.nodes) n.id *= 100003, n.parent *= 100003;
  for (auto& v : sparse.values) v.node *= 100003;
  const auto small = threadProfile(0, 0, 0x400);
  const fs::path files[] = {dir / "big.hpcrun", dir / "sparse.hpcrun", dir / "small.hpcrun"};
  hr::write(big, files[0]);
  hr::write(sparse, files[1]);
  hr::write(small, files[2]);
  auto cycle = big;  // fails late, its tables filled
  cycle.nodes.push_back({30, 32, 1, 0x10});
  cycle.nodes.push_back({32, 30, 1, 0x20});
  hr::write(cycle, dir / "bad.hpcrun");
  const auto source = reduce::hpcrunProfileSource();
  std::vector<ThreadProfile> fresh;
  for (const auto& f : files) std::thread([&] { fresh.push_back(source->read(f)); }).join();
  ASSERT_EQ(fresh[0].cct.size(), 10u + 2000u);
  for (int round = 0; round < 2; ++round)
    for (std::size_t k : {0, 1, 2, 0, 2, 1}) {
      EXPECT_EQ(source->read(files[k]), fresh[k]) << files[k];
      EXPECT_THROW(source->read(dir / "bad.hpcrun"), storage::ProfileError);
    }
}

// hpcrun lists a node's metrics in any order and may list a zero; CSP stores them by metric, and
// no zeros.
TEST(HpcrunSource, ValuesAreByMetricWhateverTheirOrderAndZerosAreNotStored) {
  TempDir dir("hpcrun-order");
  const auto plain = readOne(threadProfile(1, 0, 0x400), dir / "p.hpcrun");
  auto reversed = threadProfile(1, 0, 0x400);
  std::reverse(reversed.values.begin(), reversed.values.end());
  reversed.values.push_back({12, 0, hr::real(-0.0)});
  reversed.values.push_back({16, 1, 0});
  EXPECT_EQ(readOne(reversed, dir / "r.hpcrun"), plain);
  // A node listed twice in the node index is one node all the same.
  auto split = threadProfile(1, 0, 0x400);
  split.index = hr::Profile::Index::AsListed;
  std::stable_partition(split.values.begin(), split.values.end(), [](const hr::Value& v) { return v.metric == 1; });
  ASSERT_NE(split.values.front().node, split.values.back().node);
  EXPECT_EQ(readOne(split, dir / "s.hpcrun"), plain);
}

TEST(HpcrunSource, GpuStreamsGetCspsGpuKinds) {
  TempDir dir("hpcrun-gpu");
  auto h = threadProfile(0, 0, 0x400);
  h.idTuple = {
      {hr::Node, 1, 0}, {hr::Rank, 0, 0}, {hr::GpuDevice, 0, 0}, {hr::GpuContext, 1, 1}, {hr::GpuStream, 7, 7}};
  EXPECT_EQ(readOne(h, dir / "g.hpcrun").identity.idTuple,
            (IdTuple{{IdKind::Node, 0}, {IdKind::Rank, 0}, {IdKind::GpuContext, 1}, {IdKind::GpuStream, 7}}));
}

TEST(HpcrunSource, DamagedFilesGetOneErrorNamingTheFileAndTheDefect) {
  TempDir dir("hpcrun-bad");
  const auto file = dir / "bad.hpcrun";
  const std::string good = hr::encode(threadProfile(0, 0, 0x400));
  auto expectError = [&](const std::string& bytes, const std::string& defect) {
    const auto message = readError(bytes, file);
    EXPECT_NE(message.find(file.string() + ": " + defect), std::string::npos) << message;
  };
  expectError(good.substr(0, good.size() - 40), "truncated or unfinished: no footer at its end");
  expectError(good.substr(0, 60), "truncated: too short to hold the footer");
  expectError("", "not an hpcrun profile");
  expectError("HPCRUN-trace______01.01b" + std::string(200, '\0'), "not an hpcrun profile");
  auto old = threadProfile(0, 0, 0x400);
  old.version = "03.00";
  expectError(hr::encode(old), "hpcrun format version '03.00' is not supported (this reader knows 04.00)");
  // A section offset beyond the footer.
  std::string outside = good;
  outside[outside.size() - 112 + 7] = static_cast<char>(0xff);  // header start: low byte
  outside[outside.size() - 112 + 6] = static_cast<char>(0xff);
  expectError(outside, "footer: section");
  // Inner defects: a parent that does not exist, a module not in the load map, a cycle.
  auto orphan = threadProfile(0, 0, 0x400);
  orphan.nodes.back().parent = 99;
  expectError(hr::encode(orphan), "CCT: node");
  auto unmapped = threadProfile(0, 0, 0x400);
  unmapped.nodes.back().module = 9;
  expectError(hr::encode(unmapped), "CCT: node");
  auto cycle = threadProfile(0, 0, 0x400);
  cycle.nodes.push_back({30, 32, 1, 0x10});
  cycle.nodes.push_back({32, 30, 1, 0x20});
  expectError(hr::encode(cycle), "CCT: 2 nodes are not reachable from its roots (a cycle)");
  auto badMetric = threadProfile(0, 0, 0x400);
  badMetric.values.push_back({10, 5, 1});
  expectError(hr::encode(badMetric), "metric values: metric 5 at node 10 is not in the metric table");
  auto twice = threadProfile(0, 0, 0x400);
  twice.values.push_back({12, 1, 7});
  expectError(hr::encode(twice), "metric values: metric 1 appears twice at one node");
  // A CCT section that ends inside a node.
  std::string cut = good;
  cut[cut.size() - 112 + 4 * 8 + 7] += 1;  // cct start moves by a byte: the count reads wrong
  EXPECT_NE(readError(cut, file).find(file.string() + ": CCT: "), std::string::npos) << readError(cut, file);
}

// ---- through csp-prof-mpi ----

class HpcrunProf : public ::testing::Test {
 protected:
  HpcrunProf() : dir_("hpcrun-prof") { meas_ = measurement(dir_.path()); }

  fs::path prof(int ranks, const std::string& name, const std::string& options = "") {
    const auto db = dir_ / name;
    const auto r = run("timeout -k 5 120 " + csp::test::mpirun(ranks) + tool("csp-prof-mpi") + " -q " + options +
                       " --structure-cache off " + meas_.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return db;
  }

  TempDir dir_;
  fs::path meas_;
};

std::optional<storage::NodeId> procedure(const std::vector<storage::CctNode>& cct,
                                         const storage::DatabaseMetadata& meta, const std::string& prefix,
                                         storage::NodeId under = 0) {
  for (std::size_t i = 0; i < cct.size(); ++i)
    if (cct[i].kind == ScopeKind::ProcFrame && meta.strings[cct[i].name].starts_with(prefix)) {
      // Under `under` (0: anywhere).
      for (storage::NodeId n = static_cast<storage::NodeId>(i); under != 0 && n != 0; n = cct[n].parent)
        if (n == under) return static_cast<storage::NodeId>(i);
      if (under == 0) return static_cast<storage::NodeId>(i);
    }
  return std::nullopt;
}

double valueOf(const std::vector<storage::ProfileValue>& values, storage::NodeId node, storage::MetricId metric,
               storage::MetricScope scope, bool real) {
  for (const auto& v : values)
    if (v.node == node && v.metric == metric && v.scope == scope) return real ? realValue(v.value) : double(v.value);
  return 0;
}

TEST_F(HpcrunProf, ExactValuesPerThreadThroughTheDatabase) {
  const auto db = storage::Database::open(prof(1, "db"));
  const auto& meta = db->metadata();
  ASSERT_EQ(meta.profiles.size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(
        meta.profiles[k],
        (IdTuple{{IdKind::Node, 0}, {IdKind::Rank, std::uint64_t(k / 2)}, {IdKind::Thread, std::uint64_t(k % 2)}}));
  ASSERT_EQ(meta.metrics.size(), 2u);
  EXPECT_EQ(meta.metrics[0].valueType, storage::ValueType::Real);
  const auto cct = db->readCct();
  const auto accumulate = procedure(cct, meta, "sample::accumulate");
  const auto gone = procedure(cct, meta, "libgone.so+0x500");
  const auto idle = procedure(cct, meta, "NoActvty");
  const auto truncated = procedure(cct, meta, reduce::kTruncatedPathsName);
  ASSERT_TRUE(accumulate && gone && idle && truncated);
  EXPECT_EQ(meta.strings[cct[*idle].module], reduce::kPlaceholderModuleName);
  EXPECT_EQ(cct[*truncated].parent, 0u);
  const auto partialLeaf = procedure(cct, meta, "app+0x3000", *truncated);
  ASSERT_TRUE(partialLeaf);
  using storage::MetricScope;
  for (int k = 0; k < 4; ++k) {
    const auto values = db->profileValues(k);
    EXPECT_EQ(valueOf(values, 0, 0, MetricScope::Inclusive, true),
              0.5 * (k + 1) + 0.25 + 0.125 + 1 + 0.75 + 0.0625 * (k + 1))
        << k;
    EXPECT_EQ(valueOf(values, 0, 1, MetricScope::Inclusive, false), 3000000.0 * (k + 1) + 1000000 + 2000000 + 5000000);
    EXPECT_EQ(valueOf(values, *accumulate, 0, MetricScope::Exclusive, true), 0.0625 * (k + 1));
    EXPECT_EQ(valueOf(values, *accumulate, 1, MetricScope::Inclusive, false), 5000000.0);
    EXPECT_EQ(valueOf(values, *gone, 1, MetricScope::Exclusive, false), 1000000.0);
    EXPECT_EQ(valueOf(values, *idle, 0, MetricScope::Inclusive, true), 1.0);
    EXPECT_EQ(valueOf(values, *truncated, 0, MetricScope::Inclusive, true), 0.125);
    EXPECT_EQ(valueOf(values, *partialLeaf, 0, MetricScope::Exclusive, true), 0.125);
  }
  // The caller chain app 0x1000 -> app 0x2000 -> (recursion) app 0x2000 -> app 0x3000.
  const auto outer = procedure(cct, meta, "app+0x2000");
  ASSERT_TRUE(outer);
  const auto inner = procedure(cct, meta, "app+0x2000", cct[*outer].parent == 0 ? 0 : *outer);
  EXPECT_TRUE(inner);
}

TEST_F(HpcrunProf, StatisticsAcrossThreadsInTheViews) {
  const auto db = prof(1, "db");
  const auto r = run(tool("csp-views") + " --flat -m 'CPUTIME (sec)' -s sum,min,max --format csv " + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line, accumulate;
  while (std::getline(lines, line))
    if (line.find("sample::accumulate") != std::string::npos) accumulate = line;
  ASSERT_FALSE(accumulate.empty()) << r.output;
  // sum over the threads 0.0625 x (1 + 2 + 3 + 4), min 0.0625, max 0.25.
  EXPECT_NE(accumulate.find("0.625"), std::string::npos) << accumulate;
  EXPECT_NE(accumulate.find("0.0625"), std::string::npos) << accumulate;
  EXPECT_NE(accumulate.find("0.25"), std::string::npos) << accumulate;
}

// The imbalance analysis on hpcrun input, whose CPUTIME is real-valued seconds (exact values, no
// sampling model): thread k's app+0x3000 costs 0.5 (k + 1) s of its own and sample::accumulate
// 0.0625 (k + 1) s; everything else is the same in every thread. So the variance of the threads'
// time is explained 8/9 by the first and 1/9 by the second, exactly; the two vary together, so
// by default the second is listed as a further site of the first (their joint share 1).
TEST_F(HpcrunProf, ImbalanceCausesOfRealValuedSecondsAreExact) {
  const auto db = prof(1, "db");
  const std::string views = tool("csp-views") + " --format json -m 'CPUTIME (sec)' --threads all --imbalance ";
  auto r = run(views + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["sampling_error"], 0.0);
  ASSERT_EQ(j["causes"].size(), 1u) << r.output;
  const auto& first = j["causes"][0];
  EXPECT_EQ(first["label"], "app+0x3000");
  EXPECT_NEAR(first["share"].get<double>(), 1.0, 1e-12);
  ASSERT_EQ(first["sites"].size(), 1u);
  EXPECT_NE(first["sites"][0]["label"].get<std::string>().find("sample::accumulate"), std::string::npos);
  EXPECT_NEAR(first["sites"][0]["share"].get<double>(), 1.0 / 9, 1e-12);
  for (const auto& t : first["threads"]) EXPECT_EQ(t["value"].get<double>(), 0.5 * (t["profile"].get<int>() + 1));
  // Without clustering, two causes in the order of what they explain.
  r = run(views + "--cluster-threshold 1 " + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["causes"].size(), 2u) << r.output;
  EXPECT_EQ(j["causes"][0]["label"], "app+0x3000");
  EXPECT_NEAR(j["causes"][0]["share"].get<double>(), 8.0 / 9, 1e-12);
  EXPECT_NE(j["causes"][1]["label"].get<std::string>().find("sample::accumulate"), std::string::npos);
  EXPECT_NEAR(j["causes"][1]["share"].get<double>(), 1.0 / 9, 1e-12);
}

TEST_F(HpcrunProf, SameDatabaseForOneToFourProcesses) {
  const auto reference = csp::test::dumpDatabase(prof(1, "np1"));
  for (int ranks = 2; ranks <= 4; ++ranks) {
    const auto other = csp::test::dumpDatabase(prof(ranks, "np" + std::to_string(ranks), "-j 1"));
    ASSERT_EQ(other.size(), reference.size()) << ranks;
    for (std::size_t i = 0; i < other.size(); ++i) ASSERT_EQ(other[i], reference[i]) << ranks << " " << other[i].first;
  }
}

TEST_F(HpcrunProf, TheSummaryNotesWhatItDoesNotRead) {
  fs::create_directories(meas_ / "gpubins");
  std::ofstream(meas_ / "gpubins" / "0123abcd.gpubin") << "cubin";
  const auto r = run("timeout -k 5 120 " + tool("csp-prof-mpi") + " --structure-cache off " + meas_.string() + " -o " +
                     (dir_ / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: " + meas_.string() +
                          ": 1 trace file (*.hpctrace) and 1 GPU binary (gpubins/) of hpcrun not read"),
            std::string::npos)
      << r.output;
}

TEST_F(HpcrunProf, DamagedProfileFailsTheRunOrIsSkipped) {
  const auto bad = meas_ / "app-000009-000-a1b2-4009-0.hpcrun";
  const std::string bytes = hr::encode(threadProfile(0, 0, 0x400));
  hr::writeBytes(bytes.substr(0, bytes.size() - 20), bad);
  const auto db = dir_ / "bad-db";
  const auto r = run("timeout -k 5 120 " + tool("csp-prof-mpi") + " -q " + meas_.string() + " -o " + db.string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find(bad.string() + ": truncated or unfinished: no footer at its end"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(db)) << "nothing half-written";
  const auto skipped = storage::Database::open(prof(1, "skip-db", "--skip-invalid"));
  EXPECT_EQ(skipped->metadata().profiles.size(), 4u);
}

}  // namespace

// ---- hpcstruct files for the modules whose binaries are gone ----

// The structure of the app's module (gone since the measurement), as hpcstruct writes it.
constexpr const char* kAppStruct = R"(<?xml version="1.0"?>
<HPCToolkitStructure i="0" version="4.9" n="">
<LM i="2" n="/nonexistent/hpcrun-test/app" has-calls="1" v="{}">
  <F i="3" n="/src/app.c">
    <P i="4" n="_start" ln="_start" l="1" v="{[0xf00-0x1100)}">
      <C i="5" l="3" v="{[0xff0-0x1000)}" t="0x1f00"/>
    </P>
    <P i="6" n="main" ln="main" l="10" v="{[0x1f00-0x2100)}">
      <C i="7" l="12" v="{[0x1ff0-0x2000)}" t="0x1f00"/>
    </P>
    <P i="8" n="compute" ln="compute" l="20" v="{[0x2f00-0x3100)}">
      <L i="9" l="30" f="/src/app.c" v="{[0x2f80-0x3080)}">
        <A i="10" l="31" f="/src/kernel.h" n="kernel" v="{[0x2ff0-0x3020)}">
          <S i="11" l="5" v="{[0x3000-0x3010)}"/>
        </A>
      </L>
    </P>
  </F>
</LM>
</HPCToolkitStructure>
)";

TEST_F(HpcrunProf, ModulesWithoutBinariesAreStructuredByTheirHpcstructFile) {
  fs::create_directories(meas_ / "structs");
  std::ofstream(meas_ / "structs" / "app.hpcstruct") << kAppStruct;
  const auto path = prof(1, "db");
  const auto db = storage::Database::open(path);
  const auto& meta = db->metadata();
  const auto cct = db->readCct();
  const auto compute = procedure(cct, meta, "compute");
  ASSERT_TRUE(compute);
  EXPECT_EQ(meta.strings[cct[*compute].file], "/src/app.c");
  // compute -> loop at line 30 -> kernel (inlined) -> kernel.h:5, under main's call at app.c:12.
  std::optional<storage::NodeId> stmt;
  for (std::size_t i = 0; i < cct.size(); ++i)
    if (cct[i].kind == ScopeKind::Stmt && cct[i].line == 5 && meta.strings[cct[i].file] == "/src/kernel.h")
      stmt = static_cast<storage::NodeId>(i);
  ASSERT_TRUE(stmt);
  const auto& alien = cct[cct[*stmt].parent];
  ASSERT_EQ(alien.kind, ScopeKind::Alien);
  EXPECT_EQ(meta.strings[alien.name], "kernel");
  const auto& loop = cct[alien.parent];
  ASSERT_EQ(loop.kind, ScopeKind::Loop);
  EXPECT_EQ(loop.line, 30u);
  EXPECT_TRUE(procedure(cct, meta, "main")) << "interior frames look up their call instruction";
  EXPECT_FALSE(procedure(cct, meta, "app+0x")) << "every app address is covered";
  EXPECT_TRUE(procedure(cct, meta, "libgone.so+0x500")) << "a module without hpcstruct file: named by offset";
  // Values are unchanged by the structure: kernel.h:5's own time per thread, over its three
  // contexts (under main, under main's recursion, and the partial unwind).
  std::vector<storage::NodeId> kernelLines;
  for (std::size_t i = 0; i < cct.size(); ++i)
    if (cct[i].kind == ScopeKind::Stmt && cct[i].line == 5 && meta.strings[cct[i].file] == "/src/kernel.h")
      kernelLines.push_back(static_cast<storage::NodeId>(i));
  EXPECT_EQ(kernelLines.size(), 3u);
  for (int k = 0; k < 4; ++k) {
    double own = 0;
    for (const auto& v : db->profileValues(k))
      if (v.metric == 0 && v.scope == storage::MetricScope::Exclusive &&
          std::count(kernelLines.begin(), kernelLines.end(), v.node))
        own += realValue(v.value);
    EXPECT_EQ(own, 0.5 * (k + 1) + 0.75 + 0.125) << k;
  }
  const auto info = run(tool("csp-views") + " --info " + path.string());
  EXPECT_NE(info.output.find("from the hpcstruct file app.hpcstruct"), std::string::npos) << info.output;
}

// ---- csp-diff: an hpcrun run against a CSP run of the same program shape ----

// hpcrun: _start -> main -> compute's kernel.h:5 (through the hpcstruct file), c(k) cycles.
// CSP (csp-gen): the same path with c(k) + 1,000,000 cycles per thread.
std::uint64_t diffCycles(int k) { return 3000000ull * (k + 1); }

TEST(HpcrunDiff, AnHpcrunRunAgainstACspRunOfTheSameShape) {
  TempDir dir("hpcrun-diff");
  const auto meas = dir / "hpctoolkit-app-measurements";
  fs::create_directories(meas / "structs");
  std::ofstream(meas / "structs" / "app.hpcstruct") << kAppStruct;
  std::ostringstream json;
  json << R"({"executable": "app", "module": "app",
              "metrics": [{"name": "CYCLES", "unit": "", "kind": "counted", "period": 1}], "threads": [)";
  for (int k = 0; k < 4; ++k) {
    hr::Profile p;
    p.loadmap = {{1, kGoneApp}};
    p.metrics = {{"CYCLES", false, 1000000, ""}};
    p.nodes = {
        {2, 0, 0, hr::kPrimary}, {4, 2, 0, hr::kMainFence}, {6, 4, 1, 0x1000}, {8, 6, 1, 0x2000}, {10, 8, 1, 0x3004}};
    p.idTuple = {{hr::Rank, std::uint64_t(k / 2), std::uint64_t(k / 2)},
                 {hr::Thread, std::uint64_t(k % 2), std::uint64_t(k % 2)}};
    p.values = {{10, 0, diffCycles(k)}};
    hr::write(p, meas / ("app-" + std::to_string(k) + ".hpcrun"));
    json << (k ? "," : "") << R"({"id": {"rank": )" << k / 2 << R"(, "thread": )" << k % 2 << R"(}, "samples": [
          {"path": [{"proc": "_start", "file": "/src/app.c", "line": 1}, {"callsite": "/src/app.c:3"},
                    {"proc": "main", "file": "/src/app.c", "line": 10}, {"callsite": "/src/app.c:12"},
                    {"proc": "compute", "file": "/src/app.c", "line": 20}, {"loop": "/src/app.c:30"},
                    {"alien": "kernel", "file": "/src/kernel.h", "line": 31}, {"stmt": "/src/kernel.h:5"}],
           "counts": {"CYCLES": )"
         << diffCycles(k) + 1000000 << "}}]}";
  }
  json << "]}";
  std::ofstream(dir / "csp.json") << json.str();
  auto r = run(tool("csp-gen") + " -q --from-json " + (dir / "csp.json").string() + " -o " + (dir / "csp").string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* m : {"hpctoolkit-app-measurements", "csp"}) {
    r = run("timeout -k 5 120 " + tool("csp-prof-mpi") + " -q --structure-cache off " + (dir / m).string() + " -o " +
            (dir / (std::string(m) + ".db")).string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  r = run("timeout -k 5 60 " + tool("csp-diff") + " --metric CYCLES --p 2 --q 4 " +
          (dir / "hpctoolkit-app-measurements.db").string() + " " + (dir / "csp.db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  // (Strong scaling as if from 2 to 4 ranks: the ideal is equal cost.) Every context matched; the
  // excess is the 4 x 1,000,000 cycles, all at kernel.h:5.
  EXPECT_NE(r.output.find("Every context occurs in both runs."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("total 3e+07"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("total 3.4e+07"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("excess 4e+06"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("_start > main > compute > loop app.c:30 > inlined kernel > kernel.h:5\n"), std::string::npos)
      << r.output;
}
