// Safety of the preloaded sampler in programs that are hard on it (tests/apps/hostile.cpp): the
// loader's locks taken all the time, termination signals, jumps out of signal handlers, tiny
// stacks, a profiler of the program's own, exec chains, chdir, thread churn. Every run is under
// a timeout (a hang is a failure, never a stuck test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cpu_hogs.hpp"
#include "common/test_support.hpp"
#include "csp/storage/profile_io.hpp"
#include "measure/elf_symbols.hpp"

extern char** environ;

namespace fs = std::filesystem;
using namespace csp;

namespace {

const std::string kBin = CSP_BINARY_DIR;
const std::string kCspRun = kBin + "/launcher/csp-run";
// CSP_MEASURE_LIBRARY (which csp-run also honours) runs the tests against another build.
const std::string kLibrary = std::getenv("CSP_MEASURE_LIBRARY") != nullptr ? std::getenv("CSP_MEASURE_LIBRARY")
                                                                           : kBin + "/measure/libcsp-measure.so";
const std::string kHostile = kBin + "/tests/apps/csp-app-hostile";
const std::string kPlugin = kBin + "/tests/apps/csp-app-plugin.so";
const std::string kMpirun = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe";

fs::path scratch(const std::string& name) { return csp::test::scratchDir("safety-" + name); }

// Exit status of a shell command: the code, or 128 + signal. `timeout -k` turns a hang into 124
// (or 137 when even SIGTERM is not enough: a deadlocked sampler blocks every signal).
int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Reads (and so validates: checksums, structure, sample accounting) every profile.
std::vector<ThreadProfile> readAll(const fs::path& dir) {
  std::vector<ThreadProfile> profiles;
  for (const auto& path : storage::listProfiles(dir)) profiles.push_back(storage::readProfile(path));
  return profiles;
}

// A directory's entries with their sizes (a failed run's evidence, before scratch() removes it).
std::string listing(const fs::path& dir) {
  std::string out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    out += "\n  " + e.path().filename().string() + " " + std::to_string(e.is_regular_file() ? e.file_size() : 0);
  return ec ? " " + ec.message() : out.empty() ? " empty" : out;
}

std::uint64_t idOf(const ThreadProfile& p, IdKind kind) {
  for (const auto& e : p.identity.idTuple)
    if (e.kind == kind) return e.value;
  return ~std::uint64_t{0};
}

// Samples recorded: the counts of the sampled metrics (counted ones, such as the idleness
// metrics in ns, are no samples).
std::uint64_t recorded(const ThreadProfile& p) {
  std::uint64_t n = 0;
  for (std::size_t v = 0; v < p.values.size(); ++v)
    if (p.metrics[p.values.metric[v]].kind == MetricKind::Sampled) n += p.values.count[v];
  return n;
}

std::string setting(const ThreadProfile& p, const std::string& key) {
  for (const auto& s : p.identity.settings)
    if (s.key == key) return s.value;
  return "";
}

std::map<std::string, std::uint64_t> leafProcedures(const ThreadProfile& p, test::LeafSymbolizer& sym) {
  std::map<std::string, std::uint64_t> out;
  for (std::size_t v = 0; v < p.values.size(); ++v)
    out[sym.procedure(p, p.cct.frame[p.values.node[v]])] += p.values.count[v];
  return out;
}

// Samples with `procedure` on their call path (the leaf or a caller): the work of a function that
// also makes system calls, where a thread that was preempted takes its sample.
std::uint64_t samplesUnder(const ThreadProfile& p, test::LeafSymbolizer& sym, const std::string& procedure) {
  std::uint64_t n = 0;
  for (std::size_t v = 0; v < p.values.size(); ++v)
    for (std::uint32_t node = p.values.node[v]; node != 0; node = p.cct.parent[node])
      if (sym.procedure(p, p.cct.frame[node]) == procedure) {
        n += p.values.count[v];
        break;
      }
  return n;
}

// A child process started without a shell (so that SIGINT is not ignored, as it is for a
// shell's background job), with its stdout readable line by line.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // Reads stdout until `count` lines contain `text` (true) or the timeout passes (false).
  bool waitFor(const std::string& text, int count, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int seen = 0;
      for (std::size_t pos = 0; (pos = text_.find(text, pos)) != std::string::npos; pos += text.size()) ++seen;
      if (seen >= count) return true;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) return false;
      text_.append(buf, static_cast<std::size_t>(n));
    }
  }

  // The wait status, or -1 after `timeout` (the child is then killed by the destructor).
  int wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string text_;
};

std::string describe(int status) {
  if (status == -1) return "still running (hang)";
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

// CPU time of the waited-for descendants so far (the measured programs started by run()).
double childrenCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Item 1: a thread that dlopens and dlcloses in a loop (taking the loader's locks all the time)
// while others compute, sampled at 1,000/s. The handler used to take the loader lock (libunwind's
// dl_iterate_phdr) while holding libunwind's cache mutex: the program hung with every signal
// blocked, so that only SIGKILL ended it.
TEST(MeasureSafety, DlopenStormNeverHangs) {
  const fs::path base = scratch("dlopen");
  for (const std::string event : {"cpu-time@1000", "real-time@1000", "cpu-time@1000 -e real-time@1000"}) {
    for (int i = 0; i < 2; ++i) {
      const fs::path dir = base / ("meas-" + std::to_string(i));
      const double cpuBefore = childrenCpuSeconds();
      const int rc = run("timeout -k 2 30 " + kCspRun + " -e " + event + " -o " + dir.string() + " -- " + kHostile +
                         " dlopen-storm " + kPlugin + " 1.5 3 > /dev/null");
      const double cpu = childrenCpuSeconds() - cpuBefore;
      ASSERT_EQ(rc, 0) << "-e " << event << ", run " << i << (rc == 124 || rc == 137 ? ": hung" : "");
      const auto profiles = readAll(dir);
      EXPECT_EQ(profiles.size(), 5u) << "main (the loader) + the module walker + 3 compute threads";
      std::uint64_t samples = 0, dropped = 0;
      for (const auto& p : profiles) {
        samples += p.stats.samples;
        dropped += p.stats.droppedSamples;
        EXPECT_EQ(p.stats.samples, recorded(p) + p.stats.droppedSamples);
      }
      // Samples taken while any thread is inside dlclose are dropped and counted. How many
      // that is depends on how long the loader thread stays inside dlclose, which grows when
      // the machine is loaded (1-30 % with cpu-time, 31-57 % with real-time were seen on a
      // machine busy with other builds);
      // sampling must go on all the same.
      std::printf("-e %s run %d: %llu samples, %.1f %% dropped\n", event.c_str(), i,
                  static_cast<unsigned long long>(samples),
                  100.0 * static_cast<double>(dropped) / static_cast<double>(samples));
      // 1.5 s of 3 compute threads: 4,500 samples of CPU time on an idle machine, fewer when other
      // processes take the cores; sampling goes on if at least a third of the CPU time the
      // program got (or 300 samples of real time) is sampled.
      const bool realTime = event.find("real-time") != std::string::npos;
      const auto expected = realTime ? 300.0 : std::min(300.0, 1000.0 * cpu / 3);
      EXPECT_GT(static_cast<double>(samples), expected) << cpu << " s of CPU time";
      EXPECT_LT(dropped, samples * 9 / 10);
      EXPECT_GT(samples - dropped, 100u);
      fs::remove_all(dir);
    }
  }
}

namespace {

// CPU time (user + system, s) of a command, from `time`'s TIMEFORMAT.
double cpuSeconds(const std::string& command, const fs::path& scratchDir) {
  const fs::path out = scratchDir / "cpu.txt";
  run("bash -c 'TIMEFORMAT=\"%U %S\"; { time " + command + " > /dev/null 2>&1; } 2> " + out.string() + "'");
  std::istringstream in(slurp(out));
  double user = -1, system = -1;
  in >> user >> system;
  return user + system;
}

}  // namespace

// A library of the program loads and unloads another one in its constructor, which runs before
// the preloaded library's own static constructors, and in its destructor, which runs after the
// preloaded library's static destructors. Both reach the load map's module walk. The walk kept
// its lists in two static vectors, one swapped into the other: at exit the second was destroyed
// holding the buffer the first had already freed, and glibc aborted the program ("double free
// detected") every time. The run now ends normally with its profile.
TEST(MeasureSafety, LibraryUnloadingOutsideMainKeepsTheRun) {
  const fs::path dir = scratch("unload-outside-main") / "meas";
  const int rc = run("timeout -k 2 60 " + kCspRun + " -o " + dir.string() + " -- " + kBin +
                     "/tests/apps/csp-app-unload 20000000 > /dev/null");
  ASSERT_EQ(rc, 0) << (rc == 134 ? "aborted at exit" : "");
  EXPECT_EQ(readAll(dir).size(), 1u);
}

// The dlclose interposer records modules new to the load map; it used to rebuild the whole map
// (a few allocations per module and a comparison of every module with every other, ~40 us per
// dlclose with 100 modules loaded, ~200 us with 300). Now a module that comes back where it was
// costs a lookup: with 300 resident libraries, 2,000 dlopen/dlclose pairs without sampling cost
// less than 100 us of CPU each over the uninstrumented program (least disturbed of 3 runs each;
// 2-11 us on an idle machine, 60 us once in a CI run beside the sanitizer build, +150 us with the
// rebuild), and the plugin, reloaded at its address, is one module of the load map, not one per
// load.
TEST(MeasureSafety, DlcloseCostsALookupNotARebuild) {
  const fs::path base = scratch("dlclose-cost");
  std::string resident;
  for (int k = 0; k < 300; ++k) {
    const fs::path copy = base / (std::string("resident-") + std::to_string(k) + ".so");
    fs::copy_file(kPlugin, copy);
    resident += ' ';
    resident += copy.string();
  }
  const int pairs = 2000;
  const std::string program = kHostile + " dlopen-pairs " + kPlugin + " " + std::to_string(pairs) + " 0" + resident;
  double plain = 1e9, none = 1e9;
  for (int i = 0; i < 3; ++i) {
    plain = std::min(plain, cpuSeconds("timeout -k 5 120 " + program, base));
    none = std::min(
        none,
        cpuSeconds("timeout -k 5 120 " + kCspRun + " -e none -o " + (base / "none").string() + " -- " + program, base));
  }
  const double perPairUs = 1e6 * (none - plain) / pairs;
  std::printf(
      "%d pairs with 300 resident modules: %.3f s CPU uninstrumented, %.3f s under csp-run -e none: %+.1f us "
      "per pair\n",
      pairs, plain, none, perPairUs);
  EXPECT_LT(perPairUs, 100.0);
  // Sampled, so that the profile lists its modules.
  const fs::path dir = base / "sampled";
  ASSERT_EQ(
      run("timeout -k 5 120 " + kCspRun + " -e cpu-time@1000 -o " + dir.string() + " -- " + program + " > /dev/null"),
      0);
  for (const auto& p : readAll(dir)) {
    if (p.modules.empty()) continue;
    std::size_t plugins = 0;
    for (const auto& m : p.modules) plugins += fs::path(m.path).filename() == "csp-app-plugin.so";
    EXPECT_GE(plugins, 1u);
    EXPECT_LT(plugins, 20u) << "the plugin is recorded once per address, not once per load";
    EXPECT_LT(p.modules.size(), 300u + 60u);
  }
}

// Why samples were dropped, by cause (settings dropped-<cause>, which add up to the dropped
// samples): a dlopen/dlclose storm under real-time sampling drops its samples mostly because a
// dlclose was under way (loader-busy); csp-prof-mpi sums the causes and csp-views --info shows
// them. Before, only the total was known.
TEST(MeasureSafety, DroppedSamplesAreCountedByCause) {
  const fs::path base = scratch("dropped-causes");
  const fs::path dir = base / "meas";
  ASSERT_EQ(run("timeout -k 5 120 " + kCspRun + " -e real-time@2000 -o " + dir.string() + " -- " + kHostile +
                " dlopen-pairs " + kPlugin + " 3000 2 > /dev/null"),
            0);
  std::uint64_t loaderBusy = 0, dropped = 0;
  for (const auto& p : readAll(dir)) {
    std::uint64_t causes = 0;
    for (const auto& st : p.identity.settings)
      if (st.key.rfind("dropped-", 0) == 0) causes += std::stoull(st.value);
    EXPECT_EQ(causes, p.stats.droppedSamples) << "the causes add up to the dropped samples";
    if (!setting(p, "dropped-loader-busy").empty()) loaderBusy += std::stoull(setting(p, "dropped-loader-busy"));
    dropped += p.stats.droppedSamples;
  }
  ASSERT_GT(dropped, 0u);
  EXPECT_GT(loaderBusy, 0u);
  const std::string db = (base / "db").string();
  ASSERT_EQ(run("timeout -k 5 120 " + kBin + "/launcher/csp-prof-mpi -q --no-loops " + dir.string() + " -o " + db), 0);
  ASSERT_EQ(run("timeout -k 5 60 " + kBin + "/launcher/csp-views --info " + db + " > " + (base / "info.txt").string()),
            0);
  const std::string info = slurp(base / "info.txt");
  // (loader-busy is the cause named first on an idle machine; under load others may outnumber it.)
  const auto line = info.find("  dropped by cause: ");
  ASSERT_NE(line, std::string::npos) << info;
  EXPECT_NE(info.substr(line, info.find('\n', line) - line).find("loader-busy "), std::string::npos) << info;
}

// Item 1, with MPI: every rank loads its transport components with dlopen in MPI_Init while the
// runtime's progress threads run.
TEST(MeasureSafety, MpiRealTimeNeverHangs) {
  const fs::path base = scratch("mpi");
  for (int i = 0; i < 4; ++i) {
    const fs::path dir = base / ("meas-" + std::to_string(i));
    const int rc = run("timeout -k 5 120 " + kMpirun + " -np 4 " + kCspRun + " -e real-time@1000 -o " + dir.string() +
                       " -- " + kBin + "/tests/apps/csp-app-mpi-split 5 1 > /dev/null");
    ASSERT_EQ(rc, 0) << "run " << i << (rc == 124 || rc == 137 ? ": hung" : "");
    std::set<std::uint64_t> ranks;
    for (const auto& p : readAll(dir)) ranks.insert(idOf(p, IdKind::Rank));
    EXPECT_EQ(ranks.size(), 4u);
  }
}

namespace {

// Runs `hostile terminate 3` under csp-run, sends `sig` once every thread runs, and checks that
// the process ends by that signal with the profile of every thread written.
void expectKilledWithProfiles(int sig, const fs::path& dir) {
  Child child({kCspRun, "-e", "cpu-time@1000", "-o", dir.string(), "--", kHostile, "terminate", "3"});
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.waitFor("ready", 1, std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  // csp-run execs the program, so its pid is the program's: the signal sent to csp-run is the
  // signal the program gets.
  kill(child.pid(), sig);
  const int status = child.wait(std::chrono::seconds(30));
  ASSERT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == sig)
      << strsignal(sig) << ": " << describe(status);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 4u) << strsignal(sig) << ": main + 3 threads";
  test::LeafSymbolizer sym;
  std::set<std::uint64_t> threads;
  for (const auto& p : profiles) {
    threads.insert(idOf(p, IdKind::Thread));
    const auto leaves = leafProcedures(p, sym);
    const char* work = idOf(p, IdKind::Thread) == 0 ? "terminate_main" : "terminate_worker";
    EXPECT_GT(leaves.count(work) ? leaves.at(work) : 0, 20u)
        << strsignal(sig) << ": thread " << idOf(p, IdKind::Thread);
  }
  EXPECT_EQ(threads, (std::set<std::uint64_t>{0, 1, 2, 3}));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().extension(), ".cspprof") << "left behind: " << e.path();
}

}  // namespace

// Item 2: SIGTERM (Slurm's time limit, kill), SIGINT (Ctrl-C), SIGHUP and SIGXCPU keep every
// thread's profile, including the threads still running, and the exit status is the signal's.
TEST(MeasureSafety, TerminationSignalsKeepEveryThread) {
  const fs::path base = scratch("terminate");
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGXCPU}) expectKilledWithProfiles(sig, base / sigabbrev_np(sig));
}

// A handler of the program's own is not taken away: it runs (here: exit(3)), and the normal exit
// writes the profiles.
TEST(MeasureSafety, ProgramTerminationHandlerIsKept) {
  const fs::path dir = scratch("terminate-own") / "meas";
  Child child({kCspRun, "-o", dir.string(), "--", kHostile, "terminate", "2", "own-handler"});
  ASSERT_TRUE(child.waitFor("ready", 1, std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(child.pid(), SIGTERM);
  ASSERT_TRUE(child.waitFor("handled signal 15", 1, std::chrono::seconds(30)));
  const int status = child.wait(std::chrono::seconds(30));
  ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 3) << describe(status);
  EXPECT_EQ(readAll(dir).size(), 3u);
}

// `kill -TERM` to mpirun: Open MPI 4.1 sends the ranks SIGCONT, then, a second later
// (odls_base_sigkill_timeout), SIGTERM, and SIGKILL a second after that; every rank that dies
// meanwhile cuts the rest of that second short (see Termination, below).
// The ranks that do get SIGTERM keep all their threads' profiles; before, no rank kept any.
TEST(MeasureSafety, MpirunTerminatedKeepsRankProfiles) {
  const fs::path dir = scratch("terminate-mpi") / "meas";
  Child child({"env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "mpirun", "--oversubscribe",
               "-np", "2", kCspRun, "-o", dir.string(), "--", kHostile, "terminate", "1"});
  ASSERT_TRUE(child.waitFor("ready", 2, std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(child.pid(), SIGTERM);
  const int status = child.wait(std::chrono::seconds(60));
  ASSERT_NE(status, -1) << "mpirun did not end";
  std::map<std::uint64_t, std::set<std::uint64_t>> threadsByRank;
  for (const auto& p : readAll(dir)) {
    threadsByRank[idOf(p, IdKind::Rank)].insert(idOf(p, IdKind::Thread));
    EXPECT_GT(recorded(p), 0u);
  }
  ASSERT_FALSE(threadsByRank.empty()) << "no rank kept its profiles";
  for (const auto& [rank, threads] : threadsByRank)
    EXPECT_EQ(threads, (std::set<std::uint64_t>{0, 1})) << "rank " << rank << ": every thread or none";
}

namespace {

// What a shell command prints on stdout.
std::string output(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    pclose(pipe);
  }
  return out;
}

// Processes whose command line is `command` (pgrep -f, anchored: not the launchers that carry it).
int processesMatching(const std::string& command) {
  if (FILE* p = popen(("pgrep -fc -- '^" + command + "$'").c_str(), "r")) {
    int n = 0;
    if (std::fscanf(p, "%d", &n) != 1) n = 0;
    pclose(p);
    return n;
  }
  return -1;
}

// csp-app-mpi-split (`app`: its path and arguments, unique to the test) under csp-run, 4 ranks,
// started in the background after `prefix` (a launcher of mpirun, or nothing) with CSP_VERBOSE
// and its output in `log`: the pid of the first process of the command.
pid_t startMpiSplit(const std::string& prefix, const fs::path& dir, const fs::path& log, const std::string& app) {
  return std::atoi(output(prefix + " env CSP_VERBOSE=1 MPI_SPLIT_READY=1 " + kMpirun + " -np 4 " + kCspRun + " -o " +
                          dir.string() + " -- " + app + " > " + log.string() + " 2>&1 & echo $!")
                       .c_str());
}

// Waits until `ranks` ranks say in `log` that they work, however long a loaded machine takes to
// get there (a fixed wait once stopped a job before MPI_Init ended: no rank had a profile).
bool waitRanksWorking(const fs::path& log, std::size_t ranks) {
  auto working = [&] {
    const std::string text = slurp(log);
    std::size_t n = 0;
    for (auto at = text.find(" working\n"); at != std::string::npos; at = text.find(" working\n", at + 1)) ++n;
    return n;
  };
  for (int i = 0; i < 2400 && working() < ranks; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return working() == ranks;
}

// Waits until `launcher` and every process running `app` have ended (at most 60 s); whether they have.
bool waitJobEnded(pid_t launcher, const std::string& app) {
  for (int i = 0; i < 1200 && (kill(launcher, 0) == 0 || processesMatching(app) > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return processesMatching(app) == 0;
}

// The threads of each rank that has profiles in `dir`, and the same as text (" rank:threads").
std::map<std::uint64_t, std::set<std::uint64_t>> threadsByRank(const fs::path& dir) {
  std::map<std::uint64_t, std::set<std::uint64_t>> out;
  for (const auto& p : readAll(dir)) out[idOf(p, IdKind::Rank)].insert(idOf(p, IdKind::Thread));
  return out;
}
std::string describeRanks(const std::map<std::uint64_t, std::set<std::uint64_t>>& ranks) {
  std::string text;
  for (const auto& [rank, threads] : ranks)
    text.append(" ").append(std::to_string(rank)).append(":").append(std::to_string(threads.size()));
  return text;
}

// Every one of 4 ranks kept the profiles of its main thread and its 2 workers at least, and
// nothing but profiles is left in `dir`. `ranks`: the threads of each rank (threadsByRank).
void expectEveryRank(const fs::path& dir, const std::map<std::uint64_t, std::set<std::uint64_t>>& ranks,
                     const fs::path& log, const std::string& what) {
  ASSERT_EQ(ranks.size(), 4u) << what << ": ranks lost; rank:threads" << describeRanks(ranks) << "\n"
                              << slurp(log) << "the measurement directory:" << listing(dir);
  for (const auto& [rank, threads] : ranks) {
    EXPECT_GE(threads.size(), 3u) << what << ", rank " << rank << ": main + 2 workers at least";
    EXPECT_TRUE(threads.count(0)) << what << ", rank " << rank << ": the main thread";
  }
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_TRUE(e.path().extension() == ".cspprof" || e.path().extension() == ".cspbundle")
        << what << ": left behind: " << e.path();
}

}  // namespace

// What a Slurm time limit does to an mpirun job, on a loaded machine: `timeout -s TERM` ends
// mpirun (here once all 4 ranks compute: on a machine loaded by other jobs mpirun took more than
// 6 s to start them), which sends its ranks SIGTERM and SIGKILL a second later; every rank that
// dies meanwhile interrupts that second, which Open MPI then resumes with its whole seconds
// only, so the first rank done writing used to have the others killed at once (2 or 3 of 6 runs
// lost one or two ranks). Ranks of a node now die together once all of them have written
// (peers.cpp): every run keeps every thread of every rank.
// `timeout --foreground` signals mpirun only. Without it, timeout signals mpirun and its own
// process group (mpirun again): on a loaded machine mpirun sometimes handled the two apart, and
// a second SIGTERM makes it SIGKILL the ranks at once (no rank of that attempt kept a profile;
// docs/measurement.md). Slurm signals each process once.
TEST(MeasureSafety, TimeLimitedMpirunUnderLoadKeepsEveryRank) {
  const fs::path base = scratch("terminate-mpi-loaded");
  const std::string app = kBin + "/tests/apps/csp-app-mpi-split 2011 2";  // 2011: this test's ranks
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string what = "attempt " + std::to_string(attempt);
    const fs::path dir = base / ("meas" + std::to_string(attempt));
    const fs::path log = base / ("log" + std::to_string(attempt) + ".txt");
    const pid_t limiter = startMpiSplit("timeout --foreground -k 30 -s TERM 300", dir, log, app);
    ASSERT_GT(limiter, 0);
    ASSERT_TRUE(waitRanksWorking(log, 4)) << what << ": the ranks were not all working within 120 s\n" << slurp(log);
    ASSERT_EQ(processesMatching(app), 4) << what;
    // The machine is loaded from here until the ranks are gone: the termination is what must
    // hold up under load (hogs for the whole test took both cores from the tests beside it).
    std::optional<test::CpuHogs> hogs(std::in_place);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // some samples into the work
    // As at the time limit: timeout passes it to mpirun.
    kill(limiter, SIGTERM);
    const bool ended = waitJobEnded(limiter, app);
    hogs.reset();
    ASSERT_TRUE(ended) << what << ": ranks still running 60 s after SIGTERM";
    const auto ranks = threadsByRank(dir);
    expectEveryRank(dir, ranks, log, what);
    for (const auto& [rank, threads] : ranks) EXPECT_EQ(threads, ranks.begin()->second) << what << ", rank " << rank;
  }
}

// mpirun killed outright (SIGKILL: the OOM killer, a batch system's last resort) or stopped by a
// second SIGTERM or SIGINT (Ctrl-C twice), on which Open MPI 4.1's mpirun exits at once: no rank
// gets a signal; they lose their server, and Open MPI ends each of them with _exit, which csp
// interposes. Every rank keeps every thread's profile; before, no rank kept any.
TEST(MeasureSafety, MpirunKilledOrStoppedTwiceKeepsEveryRank) {
  const fs::path base = scratch("mpirun-killed");
  const std::string app = kBin + "/tests/apps/csp-app-mpi-split 2012 2";  // 2012: this test's ranks
  const std::vector<std::pair<std::string, std::vector<int>>> ways = {
      {"SIGKILL", {SIGKILL}}, {"two SIGTERMs", {SIGTERM, SIGTERM}}, {"two SIGINTs", {SIGINT, SIGINT}}};
  for (std::size_t n = 0; n < ways.size(); ++n) {
    const auto& [what, signals] = ways[n];
    const fs::path dir = base / ("meas" + std::to_string(n));
    const fs::path log = base / ("log" + std::to_string(n) + ".txt");
    const pid_t mpirun = startMpiSplit("", dir, log, app);
    ASSERT_GT(mpirun, 0);
    ASSERT_TRUE(waitRanksWorking(log, 4)) << what << ": the ranks were not all working within 120 s\n" << slurp(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (std::size_t i = 0; i < signals.size(); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(mpirun, signals[i]);
    }
    ASSERT_TRUE(waitJobEnded(mpirun, app)) << what << ": ranks still running 60 s later";
    expectEveryRank(dir, threadsByRank(dir), log, what);
  }
}

// MPI_Abort: the rank that calls it ends in Open MPI's _exit (its threads still running lost their
// profiles), and mpirun ends the others with SIGTERM. Every rank keeps every thread's profile.
TEST(MeasureSafety, MpiAbortKeepsEveryRank) {
  const fs::path base = scratch("mpi-abort");
  const std::string app = kBin + "/tests/apps/csp-app-mpi-split 21 2";  // rank 0 computes least
  const fs::path dir = base / "meas";
  const fs::path log = base / "log.txt";
  const pid_t mpirun = startMpiSplit("env MPI_SPLIT_ABORT=0", dir, log, app);
  ASSERT_GT(mpirun, 0);
  ASSERT_TRUE(waitJobEnded(mpirun, app)) << "ranks still running 60 s later";
  ASSERT_NE(slurp(log).find("rank 0 aborts"), std::string::npos) << slurp(log);
  expectEveryRank(dir, threadsByRank(dir), log, "MPI_Abort");
}

// _exit, _Exit and quick_exit end a process without its atexit handlers: every thread's profile
// is written all the same, and the exit status is the program's. A fork child that calls _exit keeps its own
// profile. 100 vfork children that call _exit, in the parent's memory, write nothing of the
// parent's: its main thread computes after them and keeps those samples.
// Sampled in real time: on a loaded machine, this VM's kernel (6.18) raises a thread's CPU-clock
// timer a few times per 0.1-0.3 s of its CPU time, or not at all (the overrun count carries the
// rest), so the fork child's 0.1 s of work could go unsampled. Real-time timers fire on time; a
// preempted thread takes the sample where it resumes: in its work, or in the CPU clock's system
// call that its work makes (samplesUnder counts both).
TEST(MeasureSafety, ImmediateExitKeepsEveryThread) {
  const fs::path base = scratch("immediate-exit");
  for (const auto& [how, status] : {std::pair<std::string, int>{"_exit", 5}, {"_Exit", 7}, {"quick_exit", 9}}) {
    const fs::path dir = base / how;
    ASSERT_EQ(run("timeout -k 2 60 " + kCspRun + " -e real-time@1000 -o " + dir.string() + " -- " + kHostile +
                  " immediate-exit " + how + " 0.3 > /dev/null"),
              status)
        << how;
    test::LeafSymbolizer sym;
    std::set<std::uint64_t> parentThreads;
    int children = 0;
    // Samples in each part's own work, and all the fork child's samples.
    std::uint64_t mainWork = 0, workerWork = 0, childWork = 0, childAll = 0;
    for (const auto& p : readAll(dir)) {
      if (p.identity.idTuple.size() == 3) {  // (process, pid, thread): the fork child
        ++children;
        childWork += samplesUnder(p, sym, "exit_child_work");
        childAll += recorded(p);
        continue;
      }
      parentThreads.insert(idOf(p, IdKind::Thread));
      mainWork += samplesUnder(p, sym, "exit_main");
      workerWork += samplesUnder(p, sym, "exit_worker");
    }
    EXPECT_EQ(parentThreads, (std::set<std::uint64_t>{0, 1, 2})) << how;
    // Main computes 0.3 s of its CPU time after the vfork children, which takes at least 0.3 s:
    // about 300 samples at 1 kHz, and none if a vfork child's _exit had written the parent's
    // profiles. (How many of its samples land in its wait for the fork child depends on the load.)
    EXPECT_GE(mainWork, 150u) << how << ": the main thread's work after the vfork children";
    EXPECT_GT(workerWork, 0u) << how;
    EXPECT_EQ(children, 1) << how << ": the fork child, and no vfork child";
    EXPECT_GT(childWork, 0u) << how;
    EXPECT_GT(2 * childWork, childAll) << how << ": the fork child's own work";
  }
}

// A fork child ended by SIGTERM keeps its profile: the writer thread of a termination is started
// again in every fork child. It was not: the table of which handlers are csp's was initialized
// after the library's constructor had filled it, so a fork child found none and had no writer.
TEST(MeasureSafety, TerminatedForkChildKeepsItsProfile) {
  const fs::path dir = scratch("fork-terminate") / "meas";
  // In real time, for the reason ImmediateExitKeepsEveryThread gives.
  ASSERT_EQ(run("timeout -k 2 60 " + kCspRun + " -e real-time@1000 -o " + dir.string() + " -- " + kHostile +
                " fork-terminate > /dev/null"),
            0)
      << "the child dies of SIGTERM";
  test::LeafSymbolizer sym;
  std::uint64_t childWork = 0, childAll = 0;
  int children = 0;
  for (const auto& p : readAll(dir)) {
    if (p.identity.idTuple.size() != 3) continue;
    ++children;
    childWork += samplesUnder(p, sym, "forked_child_work");
    childAll += recorded(p);
  }
  EXPECT_EQ(children, 1);
  // The child computed from the fork until the parent's 0.3 s of CPU time were over: at least
  // 0.3 s, about 300 samples at 1 kHz.
  EXPECT_GE(childWork, 150u);
  EXPECT_GT(2 * childWork, childAll) << "the child's own work";
}

// Item 4: a SIGALRM handler that siglongjmps out, 20,000 times a second. It used to interrupt the
// sample handler and jump out of it: the thread stayed "busy", sampling stopped, and the profile
// was discarded at exit for its inconsistent sample count.
TEST(MeasureSafety, JumpOutOfProgramHandlerKeepsSampling) {
  const fs::path base = scratch("longjmp");
  const fs::path dir = base / "meas";
  ASSERT_EQ(run("timeout -k 2 60 " + kCspRun + " -e cpu-time@1000 -e real-time@1000 -o " + dir.string() + " -- " +
                kHostile + " longjmp 2 > /dev/null 2> " + (base / "stderr.txt").string()),
            0);
  EXPECT_EQ(slurp(base / "stderr.txt").find("not written"), std::string::npos) << slurp(base / "stderr.txt");
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 1u);
  const auto& p = profiles[0];
  // 2 s at 1,000/s of real time alone: sampling went on to the end.
  std::uint64_t perMetric[2] = {0, 0};
  for (std::size_t v = 0; v < p.values.size(); ++v) perMetric[p.values.metric[v]] += p.values.count[v];
  EXPECT_GT(perMetric[1], 1500u) << "real-time samples";
  EXPECT_GT(perMetric[0], 500u) << "cpu-time samples";
  EXPECT_EQ(p.stats.samples, recorded(p) + p.stats.droppedSamples);
}

// Item 5: a thread with a 64 KiB stack that has 59 KiB of it in use: a sample handler on that
// stack overflows it (the program crashed only under csp-run); on the alternate stack it fits.
TEST(MeasureSafety, SmallStackThreadSurvivesSampling) {
  const fs::path base = scratch("small-stack");
  ASSERT_EQ(run("timeout -k 2 60 " + kHostile + " small-stack 0.2 > /dev/null"), 0) << "the program itself";
  const fs::path dir = base / "meas";
  ASSERT_EQ(run("timeout -k 2 60 " + kCspRun + " -e cpu-time@1000 -e real-time@1000 -o " + dir.string() + " -- " +
                kHostile + " small-stack 1 > /dev/null"),
            0);
  test::LeafSymbolizer sym;
  std::uint64_t work = 0;
  for (const auto& p : readAll(dir)) {
    const auto leaves = leafProcedures(p, sym);
    if (leaves.count("small_stack_work")) work += leaves.at("small_stack_work");
  }
  EXPECT_GT(work, 500u) << "the thread on the small stack is sampled";
}

// Item 7: a profiler of the program's own (setitimer(ITIMER_PROF) and a SIGPROF handler) sees
// only its own signals and keeps its handler, and csp's sampling goes on while the program
// blocks SIGPROF: csp samples with a signal of its own (a real-time signal), not SIGPROF.
TEST(MeasureSafety, ProgramProfilerKeepsSigprof) {
  const fs::path base = scratch("itimer");
  const fs::path dir = base / "meas";
  const std::string err = (base / "stderr.txt").string();
  ASSERT_EQ(run("timeout -k 2 60 " + kCspRun + " -e cpu-time@1000 -o " + dir.string() + " -- " + kHostile +
                " itimer 2 > /dev/null 2> " + err),
            0)
      << slurp(err);
  EXPECT_EQ(slurp(err).find("csp:"), std::string::npos) << "nothing to warn about: " << slurp(err);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 1u);
  EXPECT_EQ(setting(profiles[0], "sampling-signal").rfind("SIGRTMIN+", 0), 0u)
      << setting(profiles[0], "sampling-signal");
  EXPECT_EQ(setting(profiles[0], "sampling-signal-taken-over"), "no");
  test::LeafSymbolizer sym;
  const auto leaves = leafProcedures(profiles[0], sym);
  const std::uint64_t open = leaves.count("itimer_work") ? leaves.at("itimer_work") : 0;
  const std::uint64_t blocked = leaves.count("itimer_blocked_work") ? leaves.at("itimer_blocked_work") : 0;
  EXPECT_GT(blocked, 200u) << "sampled while the program blocks SIGPROF";
  EXPECT_GT(open, 200u);
}

// Item 7: exec ends the calling thread's timers; a timer signal already queued must not reach
// the new image (whose handlers are reset to the default action: it would be killed by it).
TEST(MeasureSafety, ExecChainAtHighRateSurvives) {
  const fs::path base = scratch("exec-chain");
  for (int i = 0; i < 3; ++i) {
    const fs::path dir = base / ("meas-" + std::to_string(i));
    const int rc = run("timeout -k 2 120 " + kCspRun + " -e real-time@20000 -o " + dir.string() + " -- " + kHostile +
                       " exec-chain 60 > /dev/null");
    ASSERT_EQ(rc, 0) << "run " << i;
    EXPECT_EQ(readAll(dir).size(), 1u) << "the last image's profile (earlier images end in exec)";
  }
}

// Item 7: a relative CSP_OUTPUT is resolved at start-up: threads that end after the program
// changed directory write to the same directory as the ones before.
TEST(MeasureSafety, RelativeOutputSurvivesChdir) {
  const fs::path base = scratch("chdir");
  fs::create_directories(base / "elsewhere");
  ASSERT_EQ(run("cd " + base.string() + " && LD_PRELOAD=" + kLibrary + " CSP_OUTPUT=meas " + kHostile +
                " chdir elsewhere > /dev/null"),
            0);
  EXPECT_EQ(readAll(base / "meas").size(), 3u) << "main + the thread before chdir + the thread after";
  EXPECT_FALSE(fs::exists(base / "elsewhere" / "meas"));
}

// Item 6: thousands of short threads, each with its own (mostly empty) profile, appended to the
// process's bundle; the alternate stacks are recycled and the sample arena is mapped only by
// threads that are sampled.
TEST(MeasureSafety, ThreadChurnWritesEveryProfile) {
  const fs::path dir = scratch("churn") / "meas";
  ASSERT_EQ(run("timeout -k 2 120 " + kCspRun + " -e cpu-time@1000 -o " + dir.string() + " -- " + kHostile +
                " threads 2000 20000 > /dev/null"),
            0);
  const auto profiles = readAll(dir);
  EXPECT_EQ(profiles.size(), 2001u);
  std::set<std::uint64_t> threads;
  for (const auto& p : profiles) threads.insert(idOf(p, IdKind::Thread));
  EXPECT_EQ(threads.size(), 2001u);
  EXPECT_EQ(*threads.rbegin(), 2000u);
  // One file for the main thread (written at exit), one bundle for the 2,000 that ended before.
  std::map<std::string, int> files;
  for (const auto& e : fs::directory_iterator(dir)) ++files[e.path().extension().string()];
  EXPECT_EQ(files, (std::map<std::string, int>{{".cspbundle", 1}, {".cspprof", 1}}));
}

// SIGTERM in the middle of thread churn: every thread that ended (written by the writer thread,
// queued for it, or between its end and the queue) and the one running keep their profiles:
// the thread indices have no gap, and the bundle holds whole records only.
TEST(MeasureSafety, TerminationDuringThreadChurnKeepsEveryEndedThread) {
  for (int round = 0; round < 3; ++round) {
    const fs::path dir = scratch("churn-term-" + std::to_string(round)) / "meas";
    Child child({kCspRun, "-e", "cpu-time@1000", "-o", dir.string(), "--", kHostile, "threads", "10000000", "20000"});
    ASSERT_GT(child.pid(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(800 + 300 * round));
    kill(child.pid(), SIGTERM);
    const int status = child.wait(std::chrono::seconds(30));
    ASSERT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << describe(status);
    const auto profiles = readAll(dir);
    std::set<std::uint64_t> threads;
    for (const auto& p : profiles) threads.insert(idOf(p, IdKind::Thread));
    ASSERT_GT(threads.size(), 100u) << "round " << round;
    EXPECT_EQ(threads.size(), profiles.size()) << "round " << round;
    EXPECT_EQ(*threads.rbegin() + 1, threads.size()) << "round " << round << ": a thread's profile is missing";
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_TRUE(e.path().extension() == ".cspprof" || e.path().extension() == ".cspbundle") << e.path();
  }
}

// The sampling signal can be chosen; SIGPROF keeps working, with the program's own SIGPROF
// handler intercepted (kept out of the way, and passed the SIGPROFs csp did not send).
TEST(MeasureSafety, ChosenSamplingSignal) {
  const fs::path base = scratch("signal");
  ASSERT_EQ(run("CSP_SIGNAL=RTMIN+9 timeout -k 2 60 " + kCspRun + " -o " + (base / "rt").string() + " -- " + kBin +
                "/tests/apps/csp-app-compute 60 > /dev/null"),
            0);
  auto profiles = readAll(base / "rt");
  ASSERT_EQ(profiles.size(), 1u);
  EXPECT_EQ(setting(profiles[0], "sampling-signal"), "SIGRTMIN+9");
  EXPECT_GT(recorded(profiles[0]), 20u);
}

// The wrappers of idleness accounting (mutexes, condition variables, joins, MPI; docs/measurement.md)
// in the same hard programs: loader locks taken all the time, jumps out of signal handlers, small
// stacks, exec chains at a high rate, thread churn, MPI at 1,000 real-time samples/s. Every run
// ends normally, writes every profile, and keeps samples = recorded + dropped.
TEST(MeasureSafety, HostileProgramsWithIdlenessAccounting) {
  const fs::path base = scratch("idleness");
  struct Case {
    std::string name, command;
    std::size_t profiles;
  };
  const std::vector<Case> cases = {
      {"dlopen", "-e cpu-time@1000 -e real-time@1000 -- " + kHostile + " dlopen-storm " + kPlugin + " 1.5 3", 5},
      {"longjmp", "-e cpu-time@1000 -e real-time@1000 -- " + kHostile + " longjmp 1", 1},
      {"small-stack", "-e cpu-time@1000 -e real-time@1000 -- " + kHostile + " small-stack 0.5", 2},
      {"exec-chain", "-e real-time@20000 -- " + kHostile + " exec-chain 30", 1},
      {"churn", "-e cpu-time@1000 -- " + kHostile + " threads 2000 20000", 2001},
  };
  for (const auto& c : cases) {
    const fs::path dir = base / c.name;
    const int rc =
        run("timeout -k 2 120 " + kCspRun + " --idleness -o " + dir.string() + " " + c.command + " > /dev/null");
    ASSERT_EQ(rc, 0) << c.name << (rc == 124 || rc == 137 ? ": hung" : "");
    const auto profiles = readAll(dir);
    EXPECT_EQ(profiles.size(), c.profiles) << c.name;
    for (const auto& p : profiles) {
      EXPECT_EQ(p.stats.samples, recorded(p) + p.stats.droppedSamples) << c.name;
      EXPECT_EQ(setting(p, "idleness"), "on") << c.name;
    }
  }
  const fs::path mpi = base / "mpi";
  const int rc = run("timeout -k 5 120 " + kMpirun + " -np 4 " + kCspRun + " --idleness -e real-time@1000 -o " +
                     mpi.string() + " -- " + kBin + "/tests/apps/csp-app-mpi-split 5 1 > /dev/null");
  ASSERT_EQ(rc, 0) << (rc == 124 || rc == 137 ? "hung" : "");
  std::set<std::uint64_t> ranks;
  for (const auto& p : readAll(mpi)) ranks.insert(idOf(p, IdKind::Rank));
  EXPECT_EQ(ranks.size(), 4u);
}
