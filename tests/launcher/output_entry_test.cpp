// Every tool that writes an output (-o) treats whatever already has that name, a symbolic link
// included, as existing: it needs --force, and a link is never followed to decide nor replaced
// (a dangling link used to pass the existence check, which followed it, and then the
// publication swapped the link itself away).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/test_support.hpp"

using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
namespace fs = std::filesystem;

namespace {

class OutputEntry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("output-entry");
    for (const char* name : {"meas1", "meas2"}) {
      const auto r = run("timeout -k 5 60 " + tool("csp-gen") + " -q --ranks " + (name[4] == '1' ? "1" : "2") +
                         " --nodes 40 -o " + (dir_->path() / name).string());
      ASSERT_EQ(r.status, 0) << r.output;
    }
    for (const char* name : {"1", "2"}) {
      const auto r = run("timeout -k 5 60 " + tool("csp-prof-mpi") + " -q " + (dir_->path() / "meas").string() + name +
                         " -o " + (dir_->path() / "db").string() + name);
      ASSERT_EQ(r.status, 0) << r.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path at(const std::string& name) { return dir_->path() / name; }

  // A dangling link and a link to a database at `name`; `command` writes `-o name` (with
  // `force` appended or not). Each attempt fails with one line naming the output, and leaves the
  // link as it was.
  void expectLinksKept(const std::string& tag, const std::string& command, const std::string& force) {
    for (const std::string& target : {std::string("nowhere"), (dir_->path() / "db1").string()}) {
      for (const std::string& extra : {std::string(), force}) {
        const std::string name = tag + "-link";
        fs::remove(at(name));
        fs::create_symlink(target, at(name));
        const auto r = run("timeout -k 5 120 " + command + " -o " + at(name).string() + " " + extra);
        const std::string what = tag + " " + extra + " over a link to " + target;
        EXPECT_NE(r.status, 0) << what << "\n" << r.output;
        EXPECT_NE(r.output.find(at(name).string() + ":"), std::string::npos) << what << ": names the output\n"
                                                                             << r.output;
        EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at(name)))) << what << ": the link was replaced";
        EXPECT_EQ(fs::read_symlink(at(name)), target) << what;
      }
    }
    const auto info = run("timeout -k 5 60 " + tool("csp-views") + " --info " + at("db1").string());
    EXPECT_EQ(info.status, 0) << tag << ": the linked database stays intact\n" << info.output;
  }

  static TempDir* dir_;
};

TempDir* OutputEntry::dir_ = nullptr;

TEST_F(OutputEntry, CspProfMpiNeverReplacesALink) {
  expectLinksKept("prof", tool("csp-prof-mpi") + " -q " + at("meas1").string(), "--force");
  // A plain database still needs --force, and gets replaced with it.
  auto r =
      run("timeout -k 5 120 " + tool("csp-prof-mpi") + " -q " + at("meas1").string() + " -o " + at("db2").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("already exists (use --force"), std::string::npos) << r.output;
  r = run("timeout -k 5 120 " + tool("csp-prof-mpi") + " -q " + at("meas1").string() + " -o " + at("db2").string() +
          " --force");
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(OutputEntry, CspDiffNeverReplacesALink) {
  expectLinksKept("diff", tool("csp-diff") + " --p 1 --q 2 " + at("db1").string() + " " + at("db2").string(),
                  "--force");
}

TEST_F(OutputEntry, CspGenNeverReplacesALink) {
  expectLinksKept("gen", tool("csp-gen") + " -q --ranks 1 --nodes 10", "--force");
}

TEST_F(OutputEntry, CspRunRefusesADanglingLink) {
  fs::create_symlink("nowhere", at("run-link"));
  const auto r = run("timeout -k 5 60 " + tool("csp-run") + " -o " + at("run-link").string() + " -- true");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("dangling symbolic link"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("run-link"))));
  // A link to a directory is used as it is: ranks share the measurement directory.
  fs::create_directories(at("run-dir"));
  fs::create_symlink(at("run-dir"), at("run-dir-link"));
  const auto ok = run("timeout -k 5 60 " + tool("csp-run") + " -o " + at("run-dir-link").string() + " -- true");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("run-dir-link"))));
}

}  // namespace
