// csp-run --memory end to end: the csp-mem Valgrind tool on tests/apps/memory.cpp, csp-prof-mpi
// reading its *.cspmem files, csp-views --cost / --growth / --footprint (docs/memory-profiles.md).
// Everything asserted is a relation of counts (fitted exponents, differences of input sizes
// between two runs, orderings), never a time; every process runs under a timeout.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using csp::test::run;
using csp::test::TempDir;
using nlohmann::json;

const std::string kBin = CSP_BINARY_DIR;
const std::string kApp = kBin + "/tests/apps/csp-app-memory";
const std::string kCspRun = "timeout -k 5 300 " + kBin + "/launcher/csp-run";

bool haveValgrind() { return run("valgrind --version").status == 0; }

// Measures `args` of the memory app into dir/meas and reduces it into dir/db.
void measureAndReduce(const fs::path& dir, const std::string& args, const std::string& options = "--no-footprint") {
  const auto r = run(kCspRun + " --memory " + options + " -o " + (dir / "meas").string() + " -- " + kApp + " " + args);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto p = run("timeout -k 5 120 " + kBin + "/launcher/csp-prof-mpi -q " + (dir / "meas").string() + " -o " +
                     (dir / "db").string());
  ASSERT_EQ(p.status, 0) << p.output;
}

json views(const fs::path& db, const std::string& options) {
  const auto r = run("timeout -k 5 60 " + kBin + "/launcher/csp-views " + options + " --format json " + db.string() +
                     " 2>/dev/null");
  EXPECT_EQ(r.status, 0) << r.output;
  return json::parse(r.output);
}

class MemoryProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveValgrind()) GTEST_SKIP() << "valgrind is not installed";
  }
};

// Routines of cost n, n log n and n^2 over inputs of 32 to 8192 cells (tests/apps/memory.cpp).
TEST_F(MemoryProfile, FittedExponentsOfKnownCostFunctions) {
  TempDir dir("mem-costs");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "costs"));
  const auto linear = views(dir / "db", "--cost linear_sum");
  const auto nlogn = views(dir / "db", "--cost nlogn_sort");
  const auto quadratic = views(dir / "db", "--cost quadratic_pairs");
  EXPECT_NEAR(linear["fit_power"]["b"].get<double>(), 1.0, 0.1) << linear.dump(1);
  EXPECT_NEAR(quadratic["fit_power"]["b"].get<double>(), 2.0, 0.1) << quadratic.dump(1);
  EXPECT_NEAR(nlogn["fit_nlogn"]["b"].get<double>(), 1.0, 0.1) << nlogn.dump(1);
  // n log n is no power law of exponent 1, and its n log n model fits better than the power law.
  EXPECT_GT(nlogn["fit_power"]["b"].get<double>(), 1.05);
  EXPECT_GT(nlogn["fit_nlogn"]["r2"].get<double>(), nlogn["fit_power"]["r2"].get<double>());
  for (const auto* f : {&linear, &nlogn, &quadratic}) {
    EXPECT_GE((*f)["points"].size(), 15u) << (*f)["routine"];
    EXPECT_GE((*f)["trms"].get<std::uint64_t>(), (*f)["rms"].get<std::uint64_t>()) << (*f)["routine"];
    // One thread and no read(): no induced input at all.
    EXPECT_EQ((*f)["induced_thread"].get<std::uint64_t>(), 0u) << (*f)["routine"];
    EXPECT_EQ((*f)["induced_kernel"].get<std::uint64_t>(), 0u) << (*f)["routine"];
    for (const auto& p : (*f)["points"]) EXPECT_GE(p["worst_cost"].get<double>(), p["mean_cost"].get<double>());
  }
  // The ranking puts the quadratic routine above the other two.
  const auto ranking = views(dir / "db", "--growth");
  std::map<std::string, std::size_t> place;
  for (std::size_t i = 0; i < ranking.size(); ++i) place[ranking[i]["routine"]] = i;
  ASSERT_TRUE(place.contains("quadratic_pairs") && place.contains("linear_sum") && place.contains("nlogn_sort"));
  EXPECT_LT(place["quadratic_pairs"], place["nlogn_sort"]);
  EXPECT_LT(place["quadratic_pairs"], place["linear_sum"]);
}

struct Input {
  std::uint64_t trms, rms, thread, kernel;
};

Input inputOf(const fs::path& db, const std::string& routine) {
  const auto f = views(db, "--cost " + routine);
  return {f["trms"], f["rms"], f["induced_thread"], f["induced_kernel"]};
}

double growth(std::uint64_t large, std::uint64_t small) {
  return static_cast<double>(large) - static_cast<double>(small);
}

// Fig. 2 of Coppa et al.: the consumer reads one cell that the producer thread rewrote before
// each read. Between N = 100 and N = 1000 its thread-induced input grows by 900 (exactly on a
// quiet machine; a contended wake-up makes libc read a lock word the other thread wrote, so up
// to 2 % more), its TRMS holds all its induced input, and its RMS barely moves: the paper's
// RMS = 1 against TRMS = n (the rest is libc's read/write machinery, constant on a quiet machine
// and a few hundred cells more when contended wake-ups take other paths).
TEST_F(MemoryProfile, ProducerConsumerInputComesFromTheOtherThread) {
  TempDir small("mem-pc100"), large("mem-pc1000");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(small.path(), "producer 100"));
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(large.path(), "producer 1000"));
  const auto a = inputOf(small / "db", "consumer"), b = inputOf(large / "db", "consumer");
  EXPECT_NEAR(growth(b.thread, a.thread), 900, 18);
  for (const auto& x : {a, b}) EXPECT_GE(x.trms, x.thread + x.kernel);
  EXPECT_GE(b.thread, 1000u);
  EXPECT_LT(std::abs(growth(b.rms, a.rms)), 450) << "RMS grows with N like the TRMS";
  EXPECT_LT(std::abs(growth(b.kernel, a.kernel)), 450) << "the input is attributed to the kernel";
}

// Fig. 3: read() refills a two-cell buffer N times and the routine reads one cell of it: its
// kernel-induced input grows by exactly 900 between N = 100 and 1000 (one thread: no schedule
// to vary), its TRMS holds it, its RMS barely moves.
TEST_F(MemoryProfile, BufferedReadInputComesFromTheKernel) {
  TempDir small("mem-ext100"), large("mem-ext1000");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(small.path(), "external 100"));
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(large.path(), "external 1000"));
  const auto a = inputOf(small / "db", "external_read"), b = inputOf(large / "db", "external_read");
  EXPECT_EQ(b.kernel - a.kernel, 900u);
  for (const auto& x : {a, b}) EXPECT_GE(x.trms, x.thread + x.kernel);
  EXPECT_GE(b.kernel, 1000u);
  EXPECT_LT(std::abs(growth(b.rms, a.rms)), 450) << "RMS grows with N like the TRMS";
  EXPECT_EQ(b.thread, a.thread) << "the input is attributed to other threads";
}

std::uint64_t footprintBlocks(const fs::path& meas) {
  std::uint64_t blocks = 0;
  for (const auto& e : fs::directory_iterator(meas)) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("footprint\t", 0) == 0)
        blocks = std::max<std::uint64_t>(blocks, std::stoull(line.substr(line.rfind('\t') + 1)));
  }
  return blocks;
}

// The footprint curves: ordered percentiles, growing with the window length, never above the
// window length or the thread's distinct blocks (up to the 1/16 of a bin's midpoint).
TEST_F(MemoryProfile, FootprintCurvesAreOrderedAndBounded) {
  TempDir dir("mem-fp");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "external 300", "--footprint-precision 90"));
  const auto blocks = static_cast<double>(footprintBlocks(dir / "meas"));
  ASSERT_GT(blocks, 0);
  const auto curves = views(dir / "db", "--footprint");
  ASSERT_GE(curves["points"].size(), 20u);
  double previous = 0;
  for (const auto& p : curves["points"]) {
    const double q[] = {p["p0"], p["p5"], p["p50"], p["p95"], p["p100"]};
    for (int i = 1; i < 5; ++i) EXPECT_LE(q[i - 1], q[i]) << p.dump();
    EXPECT_LE(q[4], 1.0625 * p["length_high"].get<double>()) << p.dump();
    EXPECT_LE(q[4], 1.0625 * blocks) << p.dump();
    EXPECT_GE(q[4], previous) << p.dump();
    previous = q[4];
  }
}

// The interleaving of the consumer (main) and producer threads over all windows of their merged
// accesses: ordered percentiles, never above half the window (the smaller of two counts) nor
// above the producer's accesses, and the ping-pong makes both threads share some windows of
// every length from 16 on.
TEST_F(MemoryProfile, InterleavingOfTwoThreadsIsBounded) {
  TempDir dir("mem-il");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "producer 200", "--footprint-precision 90"));
  std::uint64_t second = 0;
  for (const auto& e : fs::directory_iterator(dir / "meas")) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("interleave\t", 0) == 0) second = std::stoull(line.substr(line.rfind('\t') + 1));
  }
  ASSERT_GT(second, 0u);
  const auto curves = views(dir / "db", "--interleaving");
  ASSERT_GE(curves["points"].size(), 20u);
  for (const auto& p : curves["points"]) {
    const double q[] = {p["p0"], p["p5"], p["p50"], p["p95"], p["p100"]};
    for (int i = 1; i < 5; ++i) EXPECT_LE(q[i - 1], q[i]) << p.dump();
    EXPECT_LE(q[4], 1.0625 * p["length_high"].get<double>() / 2 + 1) << p.dump();
    EXPECT_LE(q[4], 1.0625 * static_cast<double>(second)) << p.dump();
    if (p["length_low"].get<double>() >= 16) {
      EXPECT_GE(q[4], 1) << p.dump();
    }
  }
}

// Each rank under the tool: the files reduce identically with 1 and 2 csp-prof-mpi processes (the
// MPI library's thousands of routines make this database large: ~2.5 GB for csp-prof-mpi).
TEST_F(MemoryProfile, MpiRanksReduceIdenticallyForAnyProcessCount) {
  TempDir dir("mem-mpi");
  const auto meas = dir / "meas";
  const auto r =
      run("timeout -k 5 600 " + csp::test::mpirun(2) + kBin + "/launcher/csp-run --memory --no-footprint -o " +
          meas.string() + " -- " + kBin + "/tests/apps/csp-app-mpi-split 1 1");
  ASSERT_EQ(r.status, 0) << r.output;
  std::set<std::string> ranks;
  for (const auto& e : fs::directory_iterator(meas)) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("rank\t", 0) == 0) ranks.insert(line.substr(5));
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));
  const std::string prof = kBin + "/launcher/csp-prof-mpi -q " + meas.string() + " -o ";
  ASSERT_EQ(run("timeout -k 5 300 " + prof + (dir / "db1").string()).status, 0);
  ASSERT_EQ(run("timeout -k 5 300 " + csp::test::mpirun(2) + prof + (dir / "db2").string()).status, 0);
  EXPECT_TRUE(csp::test::dumpDatabase(dir / "db1") == csp::test::dumpDatabase(dir / "db2"));
  const auto heavy = views(dir / "db1", "--cost work_heavy");
  EXPECT_EQ(heavy["calls"].get<std::uint64_t>(), 4u);  // 2 ranks x 2 threads x 1 unit
}

}  // namespace

namespace {

// Bad options are one line and a non-zero exit (2 for csp-run's own checks), before anything
// runs; a missing tool is named.
TEST(MemoryProfileOptions, BadOptionsAreRefused) {
  TempDir dir("mem-opts");
  const std::string out = " -o " + (dir / "meas").string() + " -- true";
  auto r = run(kCspRun + " --no-footprint" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("need --memory"), std::string::npos) << r.output;
  r = run(kCspRun + " --memory -e cpu-time" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--memory does not sample"), std::string::npos) << r.output;
  r = run(kCspRun + " --memory --footprint-precision 0" + out);  // a range check: a usage error (status 2)
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--footprint-precision"), std::string::npos) << r.output;
  r = run("CSP_MEMORY_TOOL_DIR=" + dir.path().string() + " " + kCspRun + " --memory" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("csp-mem Valgrind tool not found"), std::string::npos) << r.output;
}

TEST_F(MemoryProfile, ViewsRefuseUnknownRoutinesAndMixedAnswers) {
  TempDir dir("mem-views");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "external 10"));
  const std::string views = "timeout -k 5 60 " + kBin + "/launcher/csp-views ";
  auto r = run(views + "--cost no_such_routine " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--cost no_such_routine: no routine of that name"), std::string::npos) << r.output;
  r = run(views + "--cost external_read --growth " + (dir / "db").string());
  EXPECT_EQ(r.status, 2) << r.output;
  r = run(views + "--footprint --format csv " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("only the text and json formats"), std::string::npos) << r.output;
}

}  // namespace
