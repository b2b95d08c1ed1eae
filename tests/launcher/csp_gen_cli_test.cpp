// csp-gen as a user runs it: exit codes, messages, and what it leaves on disk.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/test_support.hpp"
#include "csp/storage/profile_io.hpp"

namespace fs = std::filesystem;

namespace {

using Result = csp::test::RunResult;

Result run(const std::string& args) { return csp::test::run(csp::test::tool("csp-gen") + " " + args); }

class CspGen : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("csp-gen-cli-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CspGen, SyntheticDirectoryIsReadable) {
  const auto out = dir_ / "meas";
  auto r = run("--ranks 4 --threads 2 --nodes 300 --seed 7 -q -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto files = csp::storage::listProfiles(out);
  ASSERT_EQ(files.size(), 8u);
  for (const auto& f : files) EXPECT_NO_THROW(csp::storage::readProfile(f));
  // Nothing besides the profiles (no staging leftovers next to it).
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST_F(CspGen, RefusesToOverwriteWithoutForce) {
  const auto out = dir_ / "meas";
  ASSERT_EQ(run("--ranks 1 --nodes 50 -q -o " + out.string()).status, 0);
  auto r = run("--ranks 2 --nodes 50 -q -o " + out.string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("already exists (use --force to replace it)"), std::string::npos) << r.output;
  EXPECT_EQ(csp::storage::listProfiles(out).size(), 1u);
  ASSERT_EQ(run("--ranks 2 --nodes 50 -q --force -o " + out.string()).status, 0);
  EXPECT_EQ(csp::storage::listProfiles(out).size(), 2u);
}

TEST_F(CspGen, BadJsonWritesNothing) {
  const auto spec = dir_ / "bad.json";
  std::ofstream(spec) << R"({"metrics": [{"name": "t"}], "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"stmt": "a.c:1"}], "counts": {"t": 1}}]}]})";
  const auto out = dir_ / "meas";
  auto r = run("--from-json " + spec.string() + " -o " + out.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(spec.string() + ": threads[0]"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);  // only the spec
}

TEST_F(CspGen, ExampleSpecRoundTrips) {
  const auto out = dir_ / "fig75";
  auto r = run(std::string("--from-json ") + CSP_TEST_DATA_DIR + "/fig75.json -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 2 profiles"), std::string::npos) << r.output;
  EXPECT_EQ(csp::storage::listProfiles(out).size(), 2u);
}

TEST_F(CspGen, BadOptionsFail) {
  EXPECT_NE(run("--ranks 0 -o x").status, 0);
  EXPECT_NE(run("--ranks 2").status, 0);  // no output directory
  EXPECT_NE(run("--from-json /nonexistent.json -o x").status, 0);
}

}  // namespace

namespace {

TEST_F(CspGen, ForceReplacesOnlyMeasurementDirectories) {
  // A folder of the user's files survives --force, whatever it holds.
  const auto user = dir_ / "results";
  fs::create_directories(user / "sub");
  std::ofstream(user / "notes.txt") << "keep me";
  auto r = run("--force --ranks 2 -q -o " + user.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(user.string() + ": not a measurement directory"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(user / "notes.txt"));
  // A profile name on a non-profile (a directory named *.cspprof) is no measurement either.
  const auto odd = dir_ / "odd";
  fs::create_directories(odd / "x.cspprof");
  EXPECT_EQ(run("--force --ranks 2 -q -o " + odd.string()).status, 1);
  EXPECT_TRUE(fs::is_directory(odd / "x.cspprof"));
  // A symlink to the user's folder is not followed into.
  fs::create_directory_symlink(user, dir_ / "link");
  EXPECT_EQ(run("--force --ranks 2 -q -o " + (dir_ / "link").string()).status, 1);
  EXPECT_TRUE(fs::exists(user / "notes.txt"));
  // An earlier measurement is replaced.
  const auto meas = dir_ / "meas";
  ASSERT_EQ(run("--ranks 4 -q -o " + meas.string()).status, 0);
  r = run("--force --ranks 2 -q -o " + meas.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(csp::storage::listProfiles(meas).size(), 2u);
  // So is an empty directory.
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(run("--force --ranks 1 -q -o " + (dir_ / "empty").string()).status, 0);
}

}  // namespace

namespace {

TEST_F(CspGen, CountTimesPeriodBeyond64BitsIsRefused) {
  const auto spec = dir_ / "big.json";
  std::ofstream(spec) << R"({"metrics": [{"name": "t", "kind": "sampled", "period": 4294967296}], "threads": [
    {"id": {"rank": 0}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"t": 4294967296}}]}]})";
  auto r = run("-q --from-json " + spec.string() + " -o " + (dir_ / "big").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("beyond 2^64 - 1"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "big"));
  // Two children whose sum would wrap their parent's inclusive value.
  std::ofstream(spec) << R"({"metrics": [{"name": "c", "kind": "counted"}], "threads": [{"id": {"rank": 0}, "samples": [
    {"path": [{"proc": "main"}, {"callsite": "m.c:2"}, {"proc": "a"}, {"stmt": "a.c:1"}], "counts": {"c": 9300000000000000000}},
    {"path": [{"proc": "main"}, {"callsite": "m.c:3"}, {"proc": "b"}, {"stmt": "b.c:1"}], "counts": {"c": 9300000000000000000}}]}]})";
  r = run("-q --from-json " + spec.string() + " -o " + (dir_ / "big").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("at CCT node"), std::string::npos) << r.output;
}

}  // namespace

namespace {

TEST_F(CspGen, HostileJsonIsOneClearError) {
  auto expect = [&](const std::string& text, const std::string& message) {
    const auto spec = dir_ / "spec.json";
    std::ofstream(spec, std::ios::trunc) << text;
    const auto r = run("-q --from-json " + spec.string() + " -o " + (dir_ / "out").string());
    EXPECT_EQ(r.status, 1) << message << "\n" << r.output;
    EXPECT_EQ(r.output, "csp-gen: error: " + spec.string() + ": " + message + "\n");
    EXPECT_FALSE(fs::exists(dir_ / "out"));
  };
  // 100,000 levels of nesting: an error, not a stack overflow.
  expect(std::string(100000, '[') + std::string(100000, ']'), "JSON: nested more than 64 levels deep");
  expect(R"({"metrics": [{"name": "a"}], "metrics": [{"name": "b"}], "threads": []})",
         "JSON: key \"metrics\" appears twice in one object");
  expect(R"({"metrics": [{"name": "t", "period": 1e400}], "threads": []})",
         "JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'");
  // A missing spec: the same one line as every other error, the same exit status.
  const auto r = run("-q --from-json " + (dir_ / "missing.json").string() + " -o " + (dir_ / "out").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output, "csp-gen: error: " + (dir_ / "missing.json").string() + ": no such file\n");
  // A bad option: one line too.
  const auto bad = run("--bogus");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
}

}  // namespace
