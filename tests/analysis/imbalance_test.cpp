// Load-imbalance cause attribution (analysis/imbalance.hpp): the F-test; exact databases whose
// causes are known by construction (two independent causes inside a common caller, a balanced
// run, noise without structure); measured programs with the shape that made the attribution
// name the common caller (two causes of different size, a heavy balanced procedure, a little
// balanced set-up), in threads and in MPI ranks, and their balanced controls; and the older
// measured program whose one cause is a data-dependent loop.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <fstream>

#include "common/test_support.hpp"
#include "csp/analysis/imbalance.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

TEST(ImbalanceStatistics, ChiSquarePValues) {
  // Critical values of the chi-square distribution.
  EXPECT_NEAR(analysis::chiSquarePValue(3.841, 1), 0.05, 0.0005);
  EXPECT_NEAR(analysis::chiSquarePValue(24.996, 15), 0.05, 0.0005);
  EXPECT_NEAR(analysis::chiSquarePValue(30.578, 15), 0.01, 0.0002);
  EXPECT_NEAR(analysis::chiSquarePValue(124.342, 100), 0.05, 0.0005);
  EXPECT_NEAR(analysis::chiSquarePValue(2, 2), std::exp(-1.0), 1e-12);  // chi-square(2) is exponential
  EXPECT_EQ(analysis::chiSquarePValue(0, 5), 1);
}

TEST(ImbalanceStatistics, FTestPValues) {
  // Critical values of the F distribution at the 5 % and 1 % levels.
  EXPECT_NEAR(analysis::fTestPValue(4.96, 1, 10), 0.05, 0.001);
  EXPECT_NEAR(analysis::fTestPValue(10.04, 1, 10), 0.01, 0.0005);
  EXPECT_NEAR(analysis::fTestPValue(4.35, 1, 20), 0.05, 0.001);
  EXPECT_NEAR(analysis::fTestPValue(161.4, 1, 1), 0.05, 0.001);
  EXPECT_NEAR(analysis::fTestPValue(1.0, 1, 1), 0.5, 1e-9);  // F(1,1) at 1 is its median
  EXPECT_EQ(analysis::fTestPValue(0, 1, 10), 1);
  EXPECT_EQ(analysis::fTestPValue(std::numeric_limits<double>::infinity(), 1, 10), 0);
}

std::uint32_t lineOf(const std::string& file, const std::string& needle) {
  std::ifstream in(file);
  std::string line;
  for (std::uint32_t n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  return 0;
}

class ImbalanceMeasured : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("imbalance");
    const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-imbalance";
    auto r = run("timeout -k 5 300 " + tool("csp-run") + " -e cpu-time@1000 -o " + (dir_->path() / "meas").string() +
                 " -- " + app + " 16");
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(tool("csp-prof-mpi") + " -q " + (dir_->path() / "meas").string() + " -o " + (dir_->path() / "db").string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static nlohmann::json report(const std::string& options) {
    const auto r = run(tool("csp-views") + " --format json " + options + " " + (dir_->path() / "db").string());
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output);
  }
  static TempDir* dir_;
};
TempDir* ImbalanceMeasured::dir_ = nullptr;

void expectTheLoopFirst(const nlohmann::json& j, double minShare = 0.8, double minCorrelation = 0.9) {
  const std::string source = std::string(CSP_SOURCE_DIR) + "/tests/apps/imbalance.cpp";
  const auto callLine = lineOf(source, "x = process_items(trips");
  ASSERT_GT(callLine, 0u);
  ASSERT_EQ(j["verdict"], "explained") << j.dump(1);
  ASSERT_FALSE(j["causes"].empty()) << j.dump(1);
  const auto& top = j["causes"][0];
  // The cause is the innermost loop of process_items (the kernel's loop, inlined into the
  // data-dependent one), and it enters the tree at the call of process_items.
  const std::string label = top["label"], path = top["path"], entry = top["entry_label"];
  EXPECT_TRUE(label.starts_with("loop ")) << j.dump(1);
  EXPECT_TRUE(path.ends_with("/process_items")) << j.dump(1);
  EXPECT_TRUE(entry == "call " + source + ":" + std::to_string(callLine) || entry == "process_items") << j.dump(1);
  EXPECT_GT(top["share"].get<double>(), minShare) << "it explains most of the imbalance";
  EXPECT_LE(top["share"].get<double>(), 1.0);
  EXPECT_GT(top["correlation"].get<double>(), minCorrelation);
  // The thread with the most trips (t = 4: the 16th of the permutation, thread 5 after the main
  // thread) is among the five where it costs most (the threads the report lists). Not among the
  // first two: its 150 ms stand 10 and 20 ms above the next two threads' (140 and 130), and on a
  // loaded VM a thread's CPU time for the same work moves by a fifth (a cold CI run beside the
  // sanitizer build listed 168 and 163 ms for those two); the sixth thread has 100 ms.
  bool listed = false;
  for (const auto& t : top["threads"]) listed = listed || t["id"].get<std::string>().ends_with("thread 5");
  EXPECT_LE(top["threads"].size(), 5u) << j.dump(1);
  EXPECT_TRUE(listed) << j.dump(1);
  // balanced_heavy costs more than process_items on average but the same in every thread, and
  // the worker that calls everything is no cause either.
  for (const auto& c : j["causes"]) {
    EXPECT_FALSE(c["path"].get<std::string>().ends_with("/balanced_heavy")) << j.dump(1);
    EXPECT_NE(c["label"], "worker") << j.dump(1);
  }
}

TEST_F(ImbalanceMeasured, TheDataDependentLoopRanksFirstForTheWorkerSection) {
  const auto j = report("--imbalance worker");
  EXPECT_EQ(j["samples"], 16);
  expectTheLoopFirst(j);
}

TEST_F(ImbalanceMeasured, TheWholeProgramOverTheWorkerThreadsByDefault) {
  const auto j = report("--imbalance");
  EXPECT_EQ(j["threads"], "worker threads");
  EXPECT_EQ(j["samples"], 16);
  expectTheLoopFirst(j);
  const auto text = run(tool("csp-views") + " --imbalance worker " + (dir_->path() / "db").string());
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("rank   share   corr        p  cause"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("enters at: "), std::string::npos) << text.output;
  const auto bad = run(tool("csp-views") + " --imbalance no_such_proc " + (dir_->path() / "db").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("section 'no_such_proc': no procedure of this name"), std::string::npos) << bad.output;
}

TEST(ImbalanceRegion, ARegionAsTheSection) {
  // The region "work" wraps each worker thread's work: its per-thread time comes from the region
  // event logs, the contexts from the whole CCT; the worker's own frames (the spine that holds
  // the thread's whole time) are not causes. The threads run one after the other: wall-clock
  // time in the region is then each thread's own work (run concurrently on a 2-core machine, it
  // is mostly the wait for a core, and on a loaded machine the wait alone).
  TempDir dir("imbalance-region");
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-imbalance";
  auto r = run("timeout -k 5 300 " + tool("csp-run") + " --region-log -e cpu-time@1000 -o " + (dir / "meas").string() +
               " -- " + app + " 16 1 serial");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-prof-mpi") + " -q " + (dir / "meas").string() + " -o " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-views") + " --format json --imbalance region:work " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["section"], "region work");
  EXPECT_EQ(j["section_measure"], "wall-clock time in the region (region event logs)");
  EXPECT_EQ(j["samples"], 16);
  // Wall-clock time on a shared machine also holds the waits for a core, which other programs'
  // load makes noise: a smaller share and correlation, the same ranking.
  expectTheLoopFirst(j, 0.1, 0.5);
  const auto text = run(tool("csp-views") + " --imbalance region:work " + (dir / "db").string());
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("load imbalance in region work: wall-clock time in the region"), std::string::npos)
      << text.output;
  const auto bad = run(tool("csp-views") + " --imbalance region:nope " + (dir / "db").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("section region:nope: no region of this name"), std::string::npos) << bad.output;
}

TEST(ImbalanceRegion, WithoutRegionLogsTheRegionSectionIsRefusedWithTheReason) {
  TempDir dir("imbalance-nolog");
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-imbalance";
  auto r = run(tool("csp-run") + " -o " + (dir / "meas").string() + " -- " + app + " 2 0.1");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-prof-mpi") + " -q " + (dir / "meas").string() + " -o " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-views") + " --imbalance region:work " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("no region event logs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--region-log"), std::string::npos) << r.output;
}

// --- exact databases: causes known by construction ------------------------------------------

using Json = nlohmann::json;

// One sample path of the exact profiles below: main > call > run > inlined work > call > proc >
// loop > line (the common caller `work` inlined into `run`), or main > call > set_up > line.
Json workPath(const std::string& proc, int line) {
  const std::string file = proc + ".c";
  return Json::array({{{"proc", "main"}, {"file", "main.c"}, {"line", 1}},
                      {{"callsite", "main.c:10"}},
                      {{"proc", "run"}, {"file", "run.c"}, {"line", 1}},
                      {{"alien", "work"}, {"file", "run.c"}, {"line", 5}},
                      {{"callsite", "work.h:" + std::to_string(line)}},
                      {{"proc", proc}, {"file", file}, {"line", 1}},
                      {{"loop", file + ":3"}},
                      {{"stmt", file + ":4"}}});
}

Json setUpPath() {
  return Json::array({{{"proc", "main"}, {"file", "main.c"}, {"line", 1}},
                      {{"callsite", "main.c:9"}},
                      {{"proc", "set_up"}, {"file", "set_up.c"}, {"line", 1}},
                      {{"stmt", "set_up.c:2"}}});
}

// Threads whose samples (of a 1 ms cpu-time) per procedure are given by `counts(t)`.
template <typename Counts>
nlohmann::json exactRun(int threads, Counts counts) {
  Json spec{
      {"executable", "app"},
      {"metrics", Json::array({{{"name", "cpu-time"}, {"unit", "ns"}, {"kind", "sampled"}, {"period", 1000000}}})},
      {"threads", Json::array()}};
  for (int t = 0; t < threads; ++t) {
    Json samples = Json::array();
    int line = 2;
    for (const auto& [proc, n] : counts(t)) {
      if (n == 0) continue;
      samples.push_back(
          {{"path", proc == "set_up" ? setUpPath() : workPath(proc, line++)}, {"counts", {{"cpu-time", n}}}});
    }
    spec["threads"].push_back({{"id", {{"rank", 0}, {"thread", t + 1}}}, {"samples", samples}});
  }
  return spec;
}

Json imbalanceOfExact(const TempDir& dir, const Json& spec, const std::string& options = "") {
  {
    std::ofstream out(dir / "spec.json");
    out << spec.dump();
  }
  std::filesystem::remove_all(dir / "meas");
  std::filesystem::remove_all(dir / "db");
  auto r = run(tool("csp-gen") + " --from-json " + (dir / "spec.json").string() + " -o " + (dir / "meas").string());
  EXPECT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-prof-mpi") + " -q " + (dir / "meas").string() + " -o " + (dir / "db").string());
  EXPECT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-views") + " --format json --threads all --imbalance " + options + " " + (dir / "db").string());
  EXPECT_EQ(r.status, 0) << r.output;
  return Json::parse(r.output);
}

// The two +-1 patterns of tests/apps/imbalance_causes.cpp: independent, mean 0 over 16 threads.
int patternU(int t) { return ((t * 5 + 3) % 16) & 1 ? 1 : -1; }
int patternV(int t) { return ((t * 5 + 3) % 16) & 2 ? 1 : -1; }

TEST(ImbalanceExact, TheCausesRankFirstNotTheirCommonCaller) {
  // scan: 80 % of the variance, refine: 20 %, heavy: the most but balanced, set_up: 5 %
  // balanced, all of it but set_up inside the inlined `work`.
  TempDir dir("imbalance-exact");
  const auto j = imbalanceOfExact(
      dir, exactRun(16, [](int t) {
        return std::vector<std::pair<std::string, int>>{
            {"set_up", 40}, {"scan", 200 + 80 * patternU(t)}, {"heavy", 400}, {"refine", 100 + 40 * patternV(t)}};
      }));
  ASSERT_EQ(j["verdict"], "explained") << j.dump(1);
  ASSERT_EQ(j["causes"].size(), 2u) << j.dump(1);
  EXPECT_EQ(j["causes"][0]["label"], "loop scan.c:3");
  EXPECT_EQ(j["causes"][0]["path"], "main/run/scan");
  EXPECT_EQ(j["causes"][0]["entry_label"], "call work.h:2");  // where it enters: the call of scan
  EXPECT_EQ(j["causes"][0]["focus_label"], "scan.c:4");
  EXPECT_NEAR(j["causes"][0]["share"].get<double>(), 0.8, 1e-9);
  EXPECT_EQ(j["causes"][1]["label"], "loop refine.c:3");
  EXPECT_EQ(j["causes"][1]["entry_label"], "call work.h:4");
  EXPECT_NEAR(j["causes"][1]["share"].get<double>(), 0.2, 1e-9);
  EXPECT_NEAR(j["r2"].get<double>(), 1.0, 1e-9);
  EXPECT_LT(j["model_p_value"].get<double>(), 0.05);
}

TEST(ImbalanceExact, SharesNeverExceedTheWhole) {
  // `wait` costs less where scan costs more (a thread that computes less waits longer): its own
  // share is negative, and the positive parts add up to more than the variance of T.
  TempDir dir("imbalance-exact-neg");
  const auto j =
      imbalanceOfExact(dir, exactRun(16, [](int t) {
                         return std::vector<std::pair<std::string, int>>{
                             {"scan", 200 + 80 * patternU(t)}, {"wait", 100 - 40 * patternU(t)}, {"heavy", 400}};
                       }));
  ASSERT_EQ(j["verdict"], "explained") << j.dump(1);
  double total = 0;
  for (const auto& c : j["causes"]) {
    EXPECT_LE(c["share"].get<double>(), 1.0 + 1e-12) << j.dump(1);
    total += c["share"].get<double>();
  }
  EXPECT_LE(total, 1.0 + 1e-12) << j.dump(1);
  EXPECT_EQ(j["causes"][0]["label"], "loop scan.c:3") << j.dump(1);
}

TEST(ImbalanceExact, WithinSamplingErrorNothingIsListed) {
  // Every thread 700 samples but one with 701: the threads could all have taken the same time.
  TempDir dir("imbalance-exact-noise");
  const auto j = imbalanceOfExact(dir,
                                  exactRun(16,
                                           [](int t) {
                                             return std::vector<std::pair<std::string, int>>{
                                                 {"set_up", 40}, {"scan", t == 3 ? 201 : 200}, {"heavy", 460}};
                                           }),
                                  "--min-imbalance 0");
  EXPECT_EQ(j["verdict"], "within-sampling-error") << j.dump(1);
  EXPECT_TRUE(j["causes"].empty()) << j.dump(1);
  EXPECT_NE(j["verdict_text"].get<std::string>().find("within sampling error"), std::string::npos);
}

TEST(ImbalanceExact, ABalancedSectionIsNotExplained) {
  // max/mean 1.02: below the default --min-imbalance (5 %), although one procedure carries it.
  TempDir dir("imbalance-exact-balanced");
  const auto j = imbalanceOfExact(dir, exactRun(16, [](int t) {
                                    return std::vector<std::pair<std::string, int>>{
                                        {"set_up", 40}, {"scan", 200 + (t == 5 ? 14 : 0)}, {"heavy", 460}};
                                  }));
  EXPECT_EQ(j["verdict"], "below-threshold") << j.dump(1);
  EXPECT_TRUE(j["causes"].empty());
}

TEST(ImbalanceExact, NoiseWithoutStructureIsNotSignificant) {
  // Twenty procedures whose costs vary at random, independently, well beyond sampling error:
  // each one's own cost is part of T, but none explains it beyond what the best of twenty random
  // vectors would by chance. Fixed pseudo-random counts (a linear congruential sequence).
  TempDir dir("imbalance-exact-random");
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((state >> 33) % 41);  // 0..40 samples
  };
  std::vector<std::vector<int>> counts(16, std::vector<int>(20));
  for (auto& thread : counts)
    for (auto& c : thread) c = 100 + next();
  const auto j = imbalanceOfExact(
      dir,
      exactRun(
          16,
          [&](int t) {
            std::vector<std::pair<std::string, int>> out;
            for (int k = 0; k < 20; ++k)
              out.push_back({fmt::format("p{}", k), counts[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)]});
            return out;
          }),
      "--min-imbalance 0");
  EXPECT_EQ(j["verdict"], "not-significant") << j.dump(1);
  EXPECT_TRUE(j["causes"].empty());
  EXPECT_GE(j["model_p_value"].get<double>(), 0.05);
  EXPECT_EQ(j["scopes_tested"].get<int>(), 20) << "the loops of 20 procedures (the procedures own nothing)";
}

TEST(ImbalanceExact, NanAndOutOfRangeOptionsAreRefused) {
  TempDir dir("imbalance-exact-options");
  imbalanceOfExact(dir, exactRun(8, [](int t) { return std::vector<std::pair<std::string, int>>{{"scan", 10 + t}}; }));
  for (const char* option : {"--min-imbalance -1", "--min-share 2"}) {
    const auto r = run(tool("csp-views") + " --imbalance " + option + " " + (dir / "db").string());
    EXPECT_NE(r.status, 0) << option << ": " << r.output;
  }
}

// --- measured programs with two causes, in threads and in MPI ranks --------------------------

void expectTwoCausesInOrder(const Json& j) {
  ASSERT_EQ(j["verdict"], "explained") << j.dump(1);
  ASSERT_GE(j["causes"].size(), 2u) << j.dump(1);
  const auto& first = j["causes"][0];
  EXPECT_TRUE(first["label"].get<std::string>().starts_with("loop ")) << j.dump(1);
  EXPECT_TRUE(first["path"].get<std::string>().ends_with("/scan_items")) << j.dump(1);
  // The second cause by construction; a small cause the machine's noise adds (MPI start-up, say)
  // may be listed too, but never above it.
  const Json* second = nullptr;
  for (const auto& c : j["causes"])
    if (c["path"].get<std::string>().ends_with("/refine_items")) second = &c;
  ASSERT_NE(second, nullptr) << j.dump(1);
  // 80 % and 20 % by construction; sampling and the machine's noise move them a little.
  EXPECT_GT(first["share"].get<double>(), 0.55) << j.dump(1);
  EXPECT_GT((*second)["share"].get<double>(), 0.08) << j.dump(1);
  EXPECT_LT((*second)["share"].get<double>(), first["share"].get<double>()) << j.dump(1);
  double total = 0;
  for (const auto& c : j["causes"]) {
    const std::string path = c["path"], label = c["label"];
    EXPECT_FALSE(path.ends_with("/balanced_heavy")) << j.dump(1);
    EXPECT_FALSE(path.ends_with("/set_up")) << j.dump(1);
    EXPECT_NE(label, "inlined work") << "the common caller is no cause: " << j.dump(1);
    EXPECT_LE(c["share"].get<double>(), 1.0);
    if (&c != second && !path.ends_with("/scan_items")) {
      EXPECT_LT(c["share"].get<double>(), (*second)["share"].get<double>()) << "noise above a cause: " << j.dump(1);
    }
    total += c["share"].get<double>();
  }
  EXPECT_LE(total, 1.0 + 1e-9) << j.dump(1);
  // The main cause enters the tree at the call of scan_items (or at scan_items, where a call was
  // made by a jump), not at the common caller or above.
  const std::string entry = first["entry_label"];
  EXPECT_TRUE(entry.starts_with("call ") || entry == "scan_items") << j.dump(1);
}

class ImbalanceCausesMeasured : public ::testing::Test {
 protected:
  static Json analyse(const TempDir& dir, const std::string& launch) {
    auto r = run(launch);
    EXPECT_EQ(r.status, 0) << r.output;
    r = run(tool("csp-prof-mpi") + " -q " + (dir / "meas").string() + " -o " + (dir / "db").string());
    EXPECT_EQ(r.status, 0) << r.output;
    r = run(tool("csp-views") + " --format json --imbalance " + (dir / "db").string());
    EXPECT_EQ(r.status, 0) << r.output;
    return Json::parse(r.output);
  }
  static std::string app(const std::string& name) { return std::string(CSP_BINARY_DIR) + "/tests/apps/" + name; }
};

// 3,000,000 iterations per trip (about 300 samples per thread): with a third of that the second
// cause's dispersion test had p of 0.003 to 0.03 and missed its Bonferroni bound in one run of
// three on a loaded machine; here p < 1e-8.
TEST_F(ImbalanceCausesMeasured, ThreadsTwoCausesRankedByWhatTheyExplain) {
  TempDir dir("imbalance-causes");
  const auto j = analyse(dir, "timeout -k 5 300 " + tool("csp-run") + " -e cpu-time@1000 -o " +
                                  (dir / "meas").string() + " -- " + app("csp-app-imbalance-causes") + " 8 3000000");
  EXPECT_EQ(j["samples"], 8) << j.dump(1);
  expectTwoCausesInOrder(j);
}

TEST_F(ImbalanceCausesMeasured, ThreadsBalancedControlListsNoCause) {
  TempDir dir("imbalance-causes-balanced");
  const auto j =
      analyse(dir, "timeout -k 5 300 " + tool("csp-run") + " -e cpu-time@1000 -o " + (dir / "meas").string() + " -- " +
                       app("csp-app-imbalance-causes") + " 8 1000000 balanced");
  EXPECT_NE(j["verdict"], "explained") << j.dump(1);
  EXPECT_TRUE(j["causes"].empty()) << j.dump(1);
}

TEST_F(ImbalanceCausesMeasured, MpiRanksTwoCausesRankedByWhatTheyExplain) {
  TempDir dir("imbalance-causes-mpi");
  const auto j = analyse(dir, "timeout -k 5 300 " + csp::test::mpirun(8) + tool("csp-run") + " -e cpu-time@1000 -o " +
                                  (dir / "meas").string() + " -- " + app("csp-app-imbalance-causes-mpi") + " 4000000");
  EXPECT_EQ(j["samples"], 8) << j.dump(1);
  expectTwoCausesInOrder(j);
}

TEST_F(ImbalanceCausesMeasured, MpiRanksBalancedControlListsNoCause) {
  TempDir dir("imbalance-causes-mpi-balanced");
  const auto j =
      analyse(dir, "timeout -k 5 300 " + csp::test::mpirun(8) + tool("csp-run") + " -e cpu-time@1000 -o " +
                       (dir / "meas").string() + " -- " + app("csp-app-imbalance-causes-mpi") + " 4000000 balanced");
  EXPECT_NE(j["verdict"], "explained") << j.dump(1);
  EXPECT_TRUE(j["causes"].empty()) << j.dump(1);
}

}  // namespace
