// csp-run --memory end to end: the csp-mem Valgrind tool on tests/apps/memory.cpp, csp-prof-mpi
// reading its *.cspmem files, csp-views --cost / --growth / --footprint (docs/memory-profiles.md).
// Everything asserted is a relation of counts (fitted exponents, differences of input sizes
// between two runs, orderings), never a time; every process runs under a timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

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

  // The same cost functions in thread CPU time. Instructions are exact; time is measured, with a
  // constant per activation beside the work (the tool's call and return, the noise of the clock's
  // system calls: about 1 us, which the smallest quadratic inputs, ~10 us, feel by ~10 %) and the
  // caches and frequency that other processes share, so its exponents are biased low and noisy:
  // 1.81 to 1.91 in five runs on the loaded machine, 1.68 once in a cold suite run beside a
  // compiler (load 9 on 2 cores). So nothing nominal is asserted of it: the quadratic routine's
  // exponent is well apart from the linear routine's and not above 2 by more than noise; the
  // exact exponents are the instruction counts' above.
  const auto quadraticTime = views(dir / "db", "--cost quadratic_pairs --cost-metric time");
  const auto linearTime = views(dir / "db", "--cost linear_sum --cost-metric time");
  EXPECT_EQ(quadraticTime["cost_metric"], "time");
  EXPECT_EQ(quadraticTime["cost_unit"], "ns");
  EXPECT_LT(quadraticTime["fit_power"]["b"].get<double>(), 2.25) << quadraticTime.dump(1);
  EXPECT_GT(quadraticTime["fit_power"]["b"].get<double>(), linearTime["fit_power"]["b"].get<double>() + 0.6)
      << quadraticTime.dump(1) << linearTime.dump(1);
  EXPECT_EQ(quadraticTime["points"].size(), quadratic["points"].size());
  EXPECT_GT(quadraticTime["cost"].get<std::uint64_t>(), 0u);
  const auto rankingTime = views(dir / "db", "--growth --cost-metric time");
  ASSERT_FALSE(rankingTime.empty());
  EXPECT_EQ(rankingTime[0]["routine"], "quadratic_pairs") << rankingTime.dump(1);
}

struct Input {
  std::uint64_t trms, rms, thread, kernel;
};

Input inputOf(const fs::path& db, const std::string& routine) {
  const auto f = views(db, "--cost " + routine);
  return {f["trms"], f["rms"], f["induced_thread"], f["induced_kernel"]};
}

// Fig. 2 of Coppa et al.: the consumer reads one cell that the producer thread rewrote before
// each read, and nothing else (tests/apps/memory.cpp synchronises by system calls on pipes that
// carry no data it reads): RMS = 1 and TRMS = N, all of it induced by the other thread, whatever
// the schedule.
TEST_F(MemoryProfile, ProducerConsumerInputComesFromTheOtherThread) {
  for (const std::uint64_t n : {100, 1000}) {
    TempDir dir("mem-pc" + std::to_string(n));
    ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "producer " + std::to_string(n)));
    const auto x = inputOf(dir / "db", "consumer");
    EXPECT_EQ(x.rms, 1u) << "N = " << n;
    EXPECT_EQ(x.trms, n) << "N = " << n;
    EXPECT_EQ(x.thread, n) << "N = " << n;
    EXPECT_EQ(x.kernel, 0u) << "N = " << n;
  }
}

// Fig. 3: read() refills a two-cell buffer N times and the routine reads one cell of it: RMS = 1
// and TRMS = N, all of it induced by the kernel.
TEST_F(MemoryProfile, BufferedReadInputComesFromTheKernel) {
  for (const std::uint64_t n : {100, 1000}) {
    TempDir dir("mem-ext" + std::to_string(n));
    ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "external " + std::to_string(n)));
    const auto x = inputOf(dir / "db", "external_read");
    EXPECT_EQ(x.rms, 1u) << "N = " << n;
    EXPECT_EQ(x.trms, n) << "N = " << n;
    EXPECT_EQ(x.kernel, n) << "N = " << n;
    EXPECT_EQ(x.thread, 0u) << "N = " << n;
  }
}

// The frames of the tool's files: (name, object) per frame line.
std::vector<std::pair<std::string, std::string>> framesOf(const fs::path& meas) {
  std::vector<std::pair<std::string, std::string>> frames;
  for (const auto& e : fs::directory_iterator(meas)) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("frame\t", 0) != 0) continue;
      std::vector<std::string> f;
      std::stringstream fields(line);
      for (std::string field; std::getline(fields, field, '\t');) f.push_back(field);
      if (f.size() >= 4) frames.emplace_back(f[2], f[3]);
    }
  }
  return frames;
}

// By default only the program's routines are activations: the C library's (read, the start-up
// code) are folded into their callers, so every frame is the executable's; --memory-routines
// all makes every routine an activation, --memory-library adds a library's.
TEST_F(MemoryProfile, LibraryRoutinesAreFoldedIntoTheirCallersFromTheProgram) {
  const auto exe = fs::canonical(kApp).string();
  const auto objects = [&](const std::string& options) {
    TempDir dir("mem-routines");
    measureAndReduce(dir.path(), "external 20", "--no-footprint " + options);
    std::set<std::string> found;
    for (const auto& [name, object] : framesOf(dir / "meas")) found.insert(object == exe ? "exe" : object);
    const auto main = views(dir / "db", "--cost main");
    EXPECT_EQ(main["calls"].get<std::uint64_t>(), 1u) << options;
    return found;
  };
  EXPECT_EQ(objects(""), (std::set<std::string>{"exe"}));
  const auto all = objects("--memory-routines all");
  EXPECT_TRUE(all.contains("exe"));
  EXPECT_TRUE(
      std::any_of(all.begin(), all.end(), [](const std::string& o) { return o.find("libc.so") != std::string::npos; }));
  EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                          [](const std::string& o) { return o.find("ld-linux") != std::string::npos; }));
  const auto libc = objects("--memory-library libc.so");
  EXPECT_TRUE(libc.contains("exe"));
  EXPECT_TRUE(std::any_of(libc.begin(), libc.end(),
                          [](const std::string& o) { return o.find("libc.so") != std::string::npos; }));
  EXPECT_FALSE(std::any_of(libc.begin(), libc.end(),
                           [](const std::string& o) { return o.find("ld-linux") != std::string::npos; }));
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

// Each rank under the tool: the files reduce identically with 1 and 2 csp-prof-mpi processes. Only
// the program's routines are activations, the MPI library's thousands are folded into them (with
// --memory-routines all this database took csp-prof-mpi 24 s and 2.4 GB, now under a second).
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
  const auto exe = fs::canonical(kBin + "/tests/apps/csp-app-mpi-split").string();
  for (const auto& [name, object] : framesOf(meas)) EXPECT_EQ(object, exe) << name;
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
  r = run(kCspRun + " --memory --memory-routines some" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--memory-routines"), std::string::npos) << r.output;
  r = run(kCspRun + " --memory --memory-routines all --memory-library libc" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--memory-library names libraries"), std::string::npos) << r.output;
  r = run(kCspRun + " --memory-library libc" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("need --memory"), std::string::npos) << r.output;
  r = run("CSP_MEMORY_TOOL_DIR=" + dir.path().string() + " " + kCspRun + " --memory" + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("csp-mem Valgrind tool not found"), std::string::npos) << r.output;
}

TEST_F(MemoryProfile, ViewsRefuseUnknownRoutinesAndMixedAnswers) {
  TempDir dir("mem-views");
  ASSERT_NO_FATAL_FAILURE(measureAndReduce(dir.path(), "external 10", "--no-footprint --no-memory-time"));
  const std::string views = "timeout -k 5 60 " + kBin + "/launcher/csp-views ";
  auto r = run(views + "--cost no_such_routine " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--cost no_such_routine: no routine of that name"), std::string::npos) << r.output;
  r = run(views + "--cost external_read --growth " + (dir / "db").string());
  EXPECT_EQ(r.status, 2) << r.output;
  r = run(views + "--cost external_read --cost-metric cycles " + (dir / "db").string());
  EXPECT_EQ(r.status, 2) << r.output;
  r = run(views + "--cost external_read --cost-metric time " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("external_read has no time values"), std::string::npos) << r.output;
  r = run(views + "--footprint --format csv " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("only the text and json formats"), std::string::npos) << r.output;
}

}  // namespace
