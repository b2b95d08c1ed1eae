// Thread classes and the drill-down's defaults on measured programs (issue 25, item 10): threads
// that wait in the program's own locks are workers, so the default views show their waiting; and
// `--node` is over the same threads as every other view, its bounds formatted like its values.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_support.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
using Json = nlohmann::json;

namespace {

const std::string kApps = std::string(CSP_BINARY_DIR) + "/tests/apps/";

Json json(const std::string& command) {
  const auto r = run(command);
  EXPECT_EQ(r.status, 0) << command << "\n" << r.output;
  return Json::parse(r.output);
}

TEST(ThreadClassesMeasured, ThreadsThatWaitForTheProgramsLockAreWorkers) {
  // One thread holds the lock for 400 ms while three wait for it (with little CPU time of their
  // own): all four take part in the program's work.
  TempDir dir("classes-waiters");
  auto r = run("timeout -k 5 120 " + tool("csp-run") + " --idleness -o " + (dir / "meas").string() + " -- " + kApps +
               "csp-app-threads blame 400");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-prof-mpi") + " -q " + (dir / "meas").string() + " -o " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto info = json(tool("csp-views") + " --info --format json " + (dir / "db").string());
  std::size_t workers = 0, waitingWorkers = 0;
  for (const auto& c : info["thread_classes"]) {
    if (c["class"] != "worker") continue;
    ++workers;
    waitingWorkers +=
        c["reason"].get<std::string>().find("waits in the program's synchronization") != std::string::npos;
  }
  EXPECT_EQ(workers, 4u) << info["thread_classes"].dump(1);
  EXPECT_GE(waitingWorkers, 3u) << info["thread_classes"].dump(1);
  // The default view (main and worker threads) shows the waiting at the root.
  const auto view = json(tool("csp-views") + " --format json -m lock-wait --depth 0 " + (dir / "db").string());
  const std::string text = view.dump();
  EXPECT_EQ(text.find("left out"), std::string::npos) << "no thread is left out: " << text;
  const auto top = run(tool("csp-views") + " -m lock-wait --depth 0 " + (dir / "db").string());
  const auto root = top.output.find("<program root>");
  ASSERT_NE(root, std::string::npos) << top.output;
  const auto line = top.output.substr(top.output.rfind('\n', root) + 1, root);
  EXPECT_NE(line.substr(0, line.find('%')).find_first_of("123456789"), std::string::npos)
      << "the root's inclusive lock-wait is not 0: " << top.output;
}

TEST(ThreadClassesMeasured, NodeDrillDownIsOverTheViewsThreads) {
  // Open MPI starts helper threads in every rank: the drill-down leaves them out by default, as
  // every other view does, and says so; --threads all brings them back.
  TempDir dir("classes-node");
  auto r = run("timeout -k 5 180 " + csp::test::mpirun(2) + tool("csp-run") + " -e cpu-time@1000 -o " +
               (dir / "meas").string() + " -- " + kApps + "csp-app-mpi-split 4 1");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(tool("csp-prof-mpi") + " -q " + (dir / "meas").string() + " -o " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto info = json(tool("csp-views") + " --info --format json " + (dir / "db").string());
  std::size_t work = 0, all = 0;
  for (const auto& c : info["thread_classes"]) {
    ++all;
    work += c["class"] != "helper";
  }
  ASSERT_LT(work, all) << "Open MPI's helper threads expected: " << info["thread_classes"].dump(1);
  const auto node = json(tool("csp-views") + " --node main --format json " + (dir / "db").string());
  EXPECT_EQ(node["profiles"], work) << node.dump(1);
  EXPECT_EQ(node["profiles_left_out"], all - work) << node.dump(1);
  const auto everything = json(tool("csp-views") + " --node main --threads all --format json " + (dir / "db").string());
  EXPECT_EQ(everything["profiles"], all);
  // The bound of a 1 ms period is 999,999 ns: formatted like the values, not as a raw integer.
  const auto text = run(tool("csp-views") + " --node main " + (dir / "db").string());
  EXPECT_EQ(text.output.find("999999"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("sampling error: each thread's value ±"), std::string::npos) << text.output;
}

}  // namespace
