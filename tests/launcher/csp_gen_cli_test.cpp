// csp-gen as a user runs it: exit codes, messages, and what it leaves on disk.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_support.hpp"
#include "csp/storage/profile_io.hpp"
#include "output_dir.hpp"

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

// csp-gen stages and publishes its directory like a database (csp/storage/publish.hpp) but links
// no RocksDB: publication lives outside the database library.
TEST_F(CspGen, LinksNoDatabaseLibrary) {
  const auto r = csp::test::run("timeout -k 5 60 ldd " + csp::test::tool("csp-gen"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("librocksdb"), std::string::npos) << r.output;
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
  std::ofstream(spec)
      << R"({"metrics": [{"name": "t"}], "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"stmt": "a.c:1"}], "counts": {"t": 1}}]}]})";
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
  r = run("--force --ranks 2 -q -o " + (dir_ / "link").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find((dir_ / "link").string() + ": a symbolic link, not a measurement directory"),
            std::string::npos)
      << r.output;
  // Nor is a file.
  std::ofstream(dir_ / "file") << "keep me";
  r = run("--force --ranks 2 -q -o " + (dir_ / "file").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find((dir_ / "file").string() + ": not a directory"), std::string::npos) << r.output;
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
  // Counts of a repeated path add up: 2^64 - 1 and 2 used to give 1.
  std::ofstream(spec) << R"({"metrics": [{"name": "c", "kind": "counted"}], "threads": [{"id": {"rank": 0}, "samples": [
    {"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"c": 18446744073709551615}},
    {"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"c": 2}}]}]})";
  r = run("-q --from-json " + spec.string() + " -o " + (dir_ / "big").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(
      r.output.find(spec.string() + ": threads[0].samples[1].counts.c: the counts of this path add up beyond 2^64 - 1"),
      std::string::npos)
      << r.output;
  // Two sampled metrics whose samples together exceed what the header can record.
  std::ofstream(spec)
      << R"({"metrics": [{"name": "a", "kind": "sampled", "period": 1}, {"name": "b", "kind": "sampled", "period": 1}],
    "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}],
    "counts": {"a": 9223372036854775808, "b": 9223372036854775808}}]}]})";
  r = run("-q --from-json " + spec.string() + " -o " + (dir_ / "big").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(spec.string() + ": threads[0]: the sampled counts add up to more than 2^64 - 1 samples"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "big"));
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

TEST_F(CspGen, NotANumberIsRefused) {
  // NaN passes a range check (every comparison with it is false); it used to give profiles whose
  // counts were all 1 (--imbalance) or that held every statement (--presence).
  for (const char* option : {"--imbalance", "--presence"})
    for (const char* value : {"nan", "NaN", "-nan"}) {
      const auto out = dir_ / "nan";
      auto r = run(std::string(option) + " " + value + " --ranks 2 --nodes 50 -q -o " + out.string());
      EXPECT_EQ(r.status, 2) << option << " " << value;  // a bad option
      EXPECT_NE(r.output.find("is not a finite number"), std::string::npos)
          << option << " " << value << ": " << r.output;
      EXPECT_FALSE(fs::exists(out)) << option << " " << value;
    }
}

}  // namespace

namespace {

TEST_F(CspGen, ReplacementMovesTheOldDirectoryAsideUnderAFreshName) {
  // --force moves the previous measurement aside before renaming the new one in. A symbolic link
  // planted at the name it used to use (.NAME.old-PID) neither stops the replacement nor is
  // followed, and stays as it was.
  const auto target = dir_ / "meas";
  fs::create_directories(target);
  std::ofstream(target / "old.cspprof") << "old";
  const auto victim = dir_ / "victim.txt";
  std::ofstream(victim) << "keep";
  const auto planted = dir_ / (".meas.old-" + std::to_string(::getpid()));
  {
    csp::cli::StagedDirectory staged(target, true, csp::cli::notAMeasurementDirectory);
    // Planted after the constructor's cleanup of leftovers (which removes such a link itself).
    fs::create_symlink(victim, planted);
    std::ofstream(staged.staging() / "new.cspprof") << "new";
    staged.publish();
  }
  EXPECT_TRUE(fs::exists(target / "new.cspprof"));
  EXPECT_FALSE(fs::exists(target / "old.cspprof"));
  std::ifstream in(victim);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "keep");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(planted)));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 3u);  // meas, the victim, the planted link: no old or staging directory left
}

}  // namespace

namespace {

std::vector<std::string> entriesOf(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// A profile already written into the staging directory of a run for `target`.
bool stagingHasProfiles(const fs::path& target) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    if (!e.path().filename().string().starts_with("." + target.filename().string() + ".tmp-")) continue;
    for (const auto& f : fs::directory_iterator(e.path(), ec))
      if (f.path().extension() == ".cspprof") return true;
  }
  return false;
}

// SIGTERM (a batch system's time limit), SIGINT (Ctrl-C) and SIGHUP used to leave the staging
// directory .NAME.tmp-PID-XXXXXX behind, and no later run ever removed or reported it.
TEST_F(CspGen, TerminationSignalsRemoveTheStagingDirectory) {
  const auto out = dir_ / "meas";
  const std::string exe = csp::test::tool("csp-gen");
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // A run far too large to finish before the signal: 10^6 profiles.
      ::execl(exe.c_str(), "csp-gen", "--ranks", "1000000", "--nodes", "400", "-j", "2", "-q", "-o", out.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!stagingHasProfiles(out) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool started = stagingHasProfiles(out);
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(started) << "csp-gen wrote no profile within 120 s";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig << ", status " << status;
    EXPECT_TRUE(entriesOf(dir_).empty()) << "signal " << sig << ": " << ::testing::PrintToString(entriesOf(dir_));
  }
}

// Leftovers of processes that died without cleaning up (SIGKILL, a node crash) are removed by the
// next run for the same output; those of a live process are reported with what to do.
TEST_F(CspGen, LeftoversOfEarlierRunsAreRemovedOrReported) {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const auto stale = dir_ / (".meas.tmp-" + std::to_string(dead) + "-Ab3xYz");
  fs::create_directories(stale);
  std::ofstream(stale / "r0.cspprof") << "half";
  // This test process is alive: its staging directory is left alone.
  const auto live = dir_ / (".meas.tmp-" + std::to_string(::getpid()) + "-Qw7eRt");
  fs::create_directories(live);
  // Not of the form mkdtemp makes: not ours to judge.
  const auto other = dir_ / ".meas.tmp-notes";
  fs::create_directories(other);
  const auto out = dir_ / "meas";
  auto r = run("--ranks 2 --nodes 50 -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(csp::storage::listProfiles(out).size(), 2u);
  EXPECT_NE(r.output.find("csp-gen: note: earlier temporary directory " + stale.string() + ": removed (process " +
                          std::to_string(dead) + " is dead)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("csp-gen: warning: earlier temporary directory " + live.string() +
                          ": left alone: its owner, process " + std::to_string(::getpid()) + ", is still running"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("stop it and the next run removes this directory"), std::string::npos) << r.output;
  // Quiet: the warning still, once per run; the note not.
  fs::create_directories(stale);
  r = run("-q --force --ranks 1 --nodes 50 -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(r.output.find("note:"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("warning: earlier temporary directory " + live.string()), std::string::npos) << r.output;
}

}  // namespace
