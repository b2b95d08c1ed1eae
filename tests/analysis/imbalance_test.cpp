// Load-imbalance cause attribution (analysis/imbalance.hpp): the F-test, and a measured program
// whose imbalance has one cause -- a data-dependent loop in one procedure of three -- which the
// attribution ranks first, while the procedure that costs most but the same in every thread is
// not ranked at all.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/test_support.hpp"
#include "csp/analysis/imbalance.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

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
    auto r = run("timeout -k 5 300 " + tool("csp-run") + " -e cpu-time@1000 -o " + (dir_->path() / "meas").string() + " -- " +
                 app + " 16");
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

void expectTheLoopFirst(const nlohmann::json& j, double minShare = 0.8) {
  const std::string source = std::string(CSP_SOURCE_DIR) + "/tests/apps/imbalance.cpp";
  const auto callLine = lineOf(source, "x = process_items(trips");
  ASSERT_GT(callLine, 0u);
  ASSERT_FALSE(j["causes"].empty()) << j.dump(1);
  const auto& top = j["causes"][0];
  // The cause enters the tree at the call of process_items (or in process_items itself).
  const std::string leader = top["leader_label"], path = top["path"];
  EXPECT_TRUE(leader == "call " + source + ":" + std::to_string(callLine) || path.ends_with("/process_items") ||
              leader == "process_items")
      << j.dump(1);
  EXPECT_GT(top["share"].get<double>(), minShare) << "it explains most of the imbalance";
  EXPECT_GT(top["correlation"].get<double>(), 0.9);
  // The thread with the most trips (t = 4: the 16th of the permutation, thread 5 after the main
  // thread) is among the two where it costs most.
  const std::string first = top["threads"][0]["id"], second = top["threads"][1]["id"];
  EXPECT_TRUE(first.ends_with("thread 5") || second.ends_with("thread 5")) << j.dump(1);
  // balanced_heavy costs more than process_items on average but the same in every thread.
  const auto heavyLine = lineOf(source, "x = balanced_heavy(");
  for (const auto& c : j["causes"]) {
    EXPECT_EQ(c["leader_label"].get<std::string>().find("balanced_heavy"), std::string::npos) << j.dump(1);
    EXPECT_NE(c["leader_label"], "call " + source + ":" + std::to_string(heavyLine)) << j.dump(1);
  }
}

TEST_F(ImbalanceMeasured, TheDataDependentLoopRanksFirstForTheWorkerSection) {
  const auto j = report("--imbalance worker");
  EXPECT_EQ(j["samples"], 16);
  EXPECT_TRUE(j["regression"].get<bool>());
  expectTheLoopFirst(j);
}

TEST_F(ImbalanceMeasured, TheWholeProgramOverTheWorkerThreadsByDefault) {
  const auto j = report("--imbalance");
  EXPECT_EQ(j["threads"], "worker threads");
  EXPECT_EQ(j["samples"], 16);
  expectTheLoopFirst(j);
  const auto text = run(tool("csp-views") + " --imbalance worker " + (dir_->path() / "db").string());
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("rank   score   share"), std::string::npos) << text.output;
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
  expectTheLoopFirst(j, 0.5);
  for (const auto& c : j["causes"]) EXPECT_NE(c["leader_label"], "worker") << j.dump(1);
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

}  // namespace
