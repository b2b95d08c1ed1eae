// Every floating-point option of every tool refuses NaN and infinities with one line naming the
// option (launcher/common/cli_numbers.hpp). csp-views --imbalance --cluster-threshold nan spun
// forever at 100 % CPU; -t nan, --hot-path nan, --min-share nan, csp-prof-mpi --helper-fraction
// nan and csp-diff --p nan were taken silently. (csp-run and csp-query have no such option: rates
// and query numbers are read as digits.)
#include <gtest/gtest.h>

#include <algorithm>

#include "common/test_support.hpp"

namespace fs = std::filesystem;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

TEST(FloatOptions, NotANumberAndInfinityAreRefusedEverywhere) {
  TempDir tmp("float-options");
  const std::string meas = (tmp / "m").string(), db = (tmp / "db").string();
  ASSERT_EQ(run("timeout 120 " + tool("csp-gen") + " -q --ranks 2 --threads 2 --nodes 50 --regions -o " + meas).status,
            0);
  ASSERT_EQ(run("timeout 120 " + tool("csp-prof-mpi") + " -q " + meas + " -o " + db).status, 0);
  // (tool and its other arguments, the option, text before the value in its argument)
  struct Case {
    std::string command, option, prefix;
  };
  const std::vector<Case> cases = {
      {"csp-views --imbalance " + db, "--cluster-threshold", ""},
      {"csp-views --imbalance " + db, "--min-share", ""},
      {"csp-views " + db, "--threshold", ""},
      {"csp-views " + db, "--hot-path", ""},
      {"csp-views --effort " + db, "--effort-thresholds", "20,"},
      {"csp-prof-mpi -q " + meas + " -o " + (tmp / "db2").string(), "--helper-fraction", ""},
      {"csp-diff " + db + " " + db, "--p", ""},
      {"csp-diff " + db + " " + db, "--q", ""},
      {"csp-gen -q -o " + (tmp / "gen").string(), "--imbalance", ""},
      {"csp-gen -q -o " + (tmp / "gen").string(), "--presence", ""},
  };
  for (const auto& c : cases)
    for (const char* value : {"nan", "-nan", "NaN", "inf", "-inf", "1e999"}) {
      // OPTION=VALUE: "-nan" is no option of its own.
      const std::string command = "timeout -k 5 60 " + tool(c.command) + " " + c.option + "=" + c.prefix + value;
      const auto r = run(command);
      EXPECT_NE(r.status, 0) << command << ": " << r.output;
      EXPECT_NE(r.status, 124) << command << ": still running after 60 s";
      EXPECT_NE(r.output.find(c.option), std::string::npos) << command << ": " << r.output;
      EXPECT_NE(r.output.find("finite"), std::string::npos) << command << ": " << r.output;
      EXPECT_FALSE(fs::exists(tmp / "db2")) << command;
      EXPECT_FALSE(fs::exists(tmp / "gen")) << command;
    }
  // Finite values in range still work.
  EXPECT_EQ(run("timeout 60 " + tool("csp-views") + " -t 0.5 --hot-path 40 " + db).status, 0);
  EXPECT_EQ(
      run("timeout 60 " + tool("csp-views") + " --imbalance --cluster-threshold 0.9 --min-share 0.01 " + db).status, 0);
}

}  // namespace
