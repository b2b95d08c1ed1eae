// The database written by several processes, and killed while it is being written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "storage/db_expect.hpp"

namespace fs = std::filesystem;
using namespace csp;
using namespace csp::storage;
using csp::test::dirEntries;
using csp::test::Synthetic;
using csp::test::TempDir;

namespace {

// A csp_db_test_writer process in its own process group (it forks writers of its own).
class WriterProcess {
 public:
  WriterProcess(const fs::path& target, const std::string& title, const Synthetic& s, std::uint32_t writers, bool force,
                const std::string& stopAt) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const std::vector<std::string> args = {CSP_DB_TEST_WRITER,
                                           target.string(),
                                           title,
                                           std::to_string(s.seed),
                                           std::to_string(s.profiles),
                                           std::to_string(s.nodes),
                                           std::to_string(writers),
                                           force ? "1" : "0",
                                           stopAt};
    // Everything the child needs is prepared here: between fork and exec it may not allocate.
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[1], 1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~WriterProcess() {
    if (pid_ > 0) killGroup();
    ::close(out_);
  }

  // Reads step lines until `step` appears; false on end of output or after 120 s.
  bool waitFor(const std::string& step) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
      for (std::size_t nl; (nl = buffer_.find('\n')) != std::string::npos;) {
        const std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        seen_.push_back(line);
        if (line == step) return true;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return false;
      buffer_.append(buf, static_cast<std::size_t>(n));
    }
  }

  // kill -9 of the builder and its writers, as a batch system would do it.
  void killGroup() {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  const std::vector<std::string>& seen() const { return seen_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
  std::vector<std::string> seen_;
};

// Builds `target` with `writers` forked writer processes, in a csp_db_test_writer process: this
// test process already runs RocksDB threads, and a fork of it could inherit a held lock.
void buildWithForkedWriters(const fs::path& target, const Synthetic& s, const std::string& title,
                            std::uint32_t writers) {
  WriterProcess w(target, title, s, writers, false, "-");
  ASSERT_EQ(w.wait(), 0) << "building " << target << " with " << writers << " writers failed";
}

// After a kill: the target is absent or a complete database with one of the expected contents;
// only clearly named temporary directories are left, and the next cleanup removes them all.
void expectNoPartialDatabase(const fs::path& target, const std::vector<std::pair<std::string, Synthetic>>& allowed,
                             const std::string& context) {
  SCOPED_TRACE(context);
  if (fs::exists(target)) {
    auto db = Database::open(target);
    const std::string title = db->metadata().title;
    bool known = false;
    for (const auto& [t, s] : allowed)
      if (t == title) {
        known = true;
        test::expectContent(*db, s, t);
      }
    EXPECT_TRUE(known) << "unexpected database " << title;
  }
  const std::string tmpPrefix = "." + target.filename().string() + ".tmp-";
  for (const auto& name : dirEntries(target.parent_path()))
    EXPECT_TRUE(name == target.filename().string() || name.starts_with(tmpPrefix)) << "left behind: " << name;
  for (const auto& r : cleanupLeftovers(target)) EXPECT_TRUE(r.removed) << r.path << ": " << r.reason;
  for (const auto& name : dirEntries(target.parent_path()))
    EXPECT_EQ(name, target.filename().string()) << "not cleaned up: " << name;
}

}  // namespace

TEST(MultiProcessWrite, OneTwoFourWritersGiveIdenticalDatabases) {
  TempDir tmp;
  const Synthetic s{.seed = 11, .profiles = 37, .nodes = 701};
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> reference;
  for (std::uint32_t writers : {1u, 2u, 4u}) {
    SCOPED_TRACE(fmt::format("{} writers", writers));
    const fs::path target = tmp.path() / fmt::format("db-{}", writers);
    buildWithForkedWriters(target, s, "same", writers);
    auto db = Database::open(target);
    test::expectContent(*db, s, "same");
    const auto dump = test::dumpAll(*db);
    for (const auto& family : databaseColumnFamilies())
      if (family != "view_cache") {
        EXPECT_FALSE(dump.count(family) == 0) << family << " is empty";
      }
    if (reference.empty())
      reference = dump;
    else
      EXPECT_TRUE(dump == reference) << "key/value streams differ from the 1-writer database";
  }
}

TEST(MultiProcessWrite, SameSplitGivesIdenticalStreams) {
  TempDir tmp;
  const Synthetic s{.seed = 5, .profiles = 20, .nodes = 300};
  buildWithForkedWriters(tmp.path() / "a", s, "t", 2);
  buildWithForkedWriters(tmp.path() / "b", s, "t", 2);
  EXPECT_TRUE(test::dumpAll(*Database::open(tmp.path() / "a")) == test::dumpAll(*Database::open(tmp.path() / "b")));
}

TEST(CrashSafety, WriterProcessCompletes) {
  TempDir tmp;
  const Synthetic s{.seed = 2, .profiles = 16, .nodes = 300};
  WriterProcess w(tmp.path() / "db", "B", s, 2, false, "-");
  ASSERT_EQ(w.wait(), 0);
  test::expectContent(*Database::open(tmp.path() / "db"), s, "B");
}

TEST(CrashSafety, KillAtEveryStepOfAFirstBuild) {
  const Synthetic b{.seed = 2, .profiles = 16, .nodes = 300};
  for (const std::string step :
       {"created", "shard-written", "metadata", "ingested", "closed", "manifest", "published"}) {
    TempDir tmp;
    const fs::path target = tmp.path() / "db";
    {
      WriterProcess w(target, "B", b, 2, false, step);
      ASSERT_TRUE(w.waitFor(step)) << step;
      w.killGroup();
    }
    expectNoPartialDatabase(target, {{"B", b}}, "killed at " + step);
    if (step != "published") {
      EXPECT_FALSE(fs::exists(target)) << step;
    }
  }
}

TEST(CrashSafety, KillAtEveryStepOfAReplacementKeepsThePreviousDatabase) {
  const Synthetic a{.seed = 1, .profiles = 16, .nodes = 300};
  const Synthetic b{.seed = 2, .profiles = 16, .nodes = 300};
  for (const std::string step :
       {"created", "shard-written", "metadata", "ingested", "closed", "manifest", "exchanged", "published"}) {
    TempDir tmp;
    const fs::path target = tmp.path() / "db";
    test::buildInProcess(target, a, "A");
    {
      WriterProcess w(target, "B", b, 2, true, step);
      ASSERT_TRUE(w.waitFor(step)) << step;
      w.killGroup();
    }
    const bool replaced = step == "exchanged" || step == "published";
    EXPECT_EQ(Database::open(target)->metadata().title, replaced ? "B" : "A") << step;
    expectNoPartialDatabase(target, {{"A", a}, {"B", b}}, "killed at " + step);
    // The next run works normally.
    test::buildInProcess(target, a, "A", 1, true);
  }
}

TEST(CrashSafety, KillAtRandomTimes) {
  const Synthetic a{.seed = 1, .profiles = 16, .nodes = 300};
  const Synthetic b{.seed = 2, .profiles = 24, .nodes = 900};
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, a, "A");
  // How long a full build takes, to spread the kills over it.
  auto start = std::chrono::steady_clock::now();
  {
    WriterProcess w(tmp.path() / "timing", "B", b, 2, false, "-");
    ASSERT_EQ(w.wait(), 0);
  }
  const auto full = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  fs::remove_all(tmp.path() / "timing");
  std::mt19937 rng(42);
  for (int i = 0; i < 10; ++i) {
    const auto delay = std::chrono::microseconds(rng() % (full.count() + 1));
    {
      WriterProcess w(target, "B", b, 2, true, "-");
      std::this_thread::sleep_for(delay);
      w.killGroup();
    }
    expectNoPartialDatabase(target, {{"A", a}, {"B", b}}, fmt::format("killed after {} us", delay.count()));
    if (Database::open(target)->metadata().title == "B") test::buildInProcess(target, a, "A", 1, true);
  }
}
