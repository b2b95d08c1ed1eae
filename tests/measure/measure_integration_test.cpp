// Integration tests of csp-run + libcsp-measure.so on the test applications of tests/apps,
// with real mpirun. They check what the profiles say against what the programs are known to do.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fcntl.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/test_support.hpp"
#include "csp/storage/profile_io.hpp"
#include "measure/elf_symbols.hpp"

namespace fs = std::filesystem;
using namespace csp;

namespace {

const std::string kBin = CSP_BINARY_DIR;
const std::string kCspRun = kBin + "/launcher/csp-run";
const std::string kApps = kBin + "/tests/apps/";
const std::string kMpirun =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun "
    "--oversubscribe";

fs::path scratch(const std::string& name) { return csp::test::scratchDir(name); }

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::vector<ThreadProfile> readAll(const fs::path& dir) {
  std::vector<ThreadProfile> profiles;
  for (const auto& path : storage::listProfiles(dir)) profiles.push_back(storage::readProfile(path));
  return profiles;
}

std::uint64_t idOf(const ThreadProfile& p, IdKind kind) {
  for (const auto& e : p.identity.idTuple)
    if (e.kind == kind) return e.value;
  return ~std::uint64_t{0};
}

std::uint64_t sampleCount(const ThreadProfile& p) {
  std::uint64_t n = 0;
  for (auto c : p.values.count) n += c;
  return n;
}

// Samples per leaf procedure (all metrics together).
std::map<std::string, std::uint64_t> leafProcedures(const ThreadProfile& p, test::LeafSymbolizer& sym) {
  std::map<std::string, std::uint64_t> out;
  for (std::size_t v = 0; v < p.values.size(); ++v)
    out[sym.procedure(p, p.cct.frame[p.values.node[v]])] += p.values.count[v];
  return out;
}

std::size_t depthOf(const ThreadProfile& p, std::uint32_t node) {
  std::size_t d = 0;
  for (; node != 0; node = p.cct.parent[node]) ++d;
  return d;
}

void expectHealthy(const ThreadProfile& p) {
  EXPECT_EQ(p.frameKind, FrameKind::Address);
  ASSERT_FALSE(p.metrics.empty());
  EXPECT_EQ(p.metrics[0].name, "cpu-time");
  EXPECT_EQ(p.metrics[0].period, 5'000'000u);
  // A thread that was never sampled needs (and lists) no module.
  if (p.cct.size() > 1) {
    ASSERT_FALSE(p.modules.empty());
    EXPECT_FALSE(p.modules[0].buildId.empty()) << p.modules[0].path;  // the executable
  } else {
    EXPECT_TRUE(p.modules.empty());
  }
  EXPECT_EQ(p.stats.truncatedPaths, 0u);
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string setting(const ThreadProfile& p, const std::string& key) {
  for (const auto& s : p.identity.settings)
    if (s.key == key) return s.value;
  return "";
}

}  // namespace

// (a) 4 ranks x 3 threads, work_heavy : work_light = 2 : 1, rank r does (1 + r/4) x base.
TEST(MeasureIntegration, MpiSplitAndImbalance) {
  const fs::path dir = scratch("mpi") / "meas";
  ASSERT_EQ(run(kMpirun + " -np 4 " + kCspRun + " -o " + dir.string() + " -- " + kApps + "csp-app-mpi-split 30 2"), 0);
  const auto profiles = readAll(dir);

  test::LeafSymbolizer sym;
  std::set<std::pair<std::uint64_t, std::uint64_t>> tuples;
  std::map<std::uint64_t, std::uint64_t> workByRank;
  std::map<std::uint64_t, int> workingThreads;
  std::uint64_t heavy = 0, light = 0, total = 0, failures = 0, completePaths = 0;
  for (const auto& p : profiles) {
    expectHealthy(p);
    ASSERT_EQ(p.identity.idTuple.size(), 2u) << formatIdTuple(p.identity.idTuple);
    EXPECT_EQ(p.identity.idTuple[0].kind, IdKind::Rank);
    EXPECT_EQ(p.identity.idTuple[1].kind, IdKind::Thread);
    const auto rank = idOf(p, IdKind::Rank), thread = idOf(p, IdKind::Thread);
    EXPECT_LT(rank, 4u);
    EXPECT_TRUE(tuples.insert({rank, thread}).second) << "duplicate id tuple " << formatIdTuple(p.identity.idTuple);
    const auto leaves = leafProcedures(p, sym);
    const std::uint64_t h = leaves.count("work_heavy") ? leaves.at("work_heavy") : 0;
    const std::uint64_t l = leaves.count("work_light") ? leaves.at("work_light") : 0;
    heavy += h;
    light += l;
    total += p.stats.samples;
    failures += p.stats.unwindFailures;
    workByRank[rank] += h + l;
    if (h + l > 20) workingThreads[rank] += 1;
    // A complete unwind ends in the executable (_start) or, for threads, in libc (clone).
    for (std::size_t v = 0; v < p.values.size(); ++v) {
      std::uint32_t n = p.values.node[v];
      while (p.cct.parent[n] != 0) n = p.cct.parent[n];
      const std::string& module = p.modules[p.addressFrames[p.cct.frame[n]].module].path;
      if (module == p.identity.executable || module.find("libc.so") != std::string::npos)
        completePaths += p.values.count[v];
    }
  }
  for (std::uint64_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(tuples.count({r, 0})) << "no main-thread profile for rank " << r;
    EXPECT_EQ(workingThreads[r], 3) << "rank " << r << " should have 3 working threads";
  }
  ASSERT_GT(total, 500u);
  EXPECT_GT(heavy + light, total * 8 / 10) << "most samples should be in the two work procedures";
  // The 2:1 split within +-5 % of all samples.
  const double expectedHeavy = 2.0 / 3.0 * static_cast<double>(heavy + light);
  EXPECT_NEAR(static_cast<double>(heavy), expectedHeavy, 0.05 * static_cast<double>(total))
      << "heavy " << heavy << " light " << light << " total " << total;
  // The imbalance: rank r / rank 0 = 1 + r/4.
  for (std::uint64_t r = 1; r < 4; ++r) {
    const double ratio = static_cast<double>(workByRank[r]) / static_cast<double>(workByRank[0]);
    std::printf("mpi_split: rank %llu / rank 0 = %.3f (expected %.2f)\n", static_cast<unsigned long long>(r), ratio,
                1.0 + static_cast<double>(r) / 4.0);
    EXPECT_NEAR(ratio, 1.0 + static_cast<double>(r) / 4.0, 0.15) << "rank " << r;
  }
  const double failureRate = static_cast<double>(failures) / static_cast<double>(total);
  std::printf("mpi_split: %llu samples, heavy %llu, light %llu, unwind failures %.4f %%, complete paths %.2f %%\n",
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(heavy),
              static_cast<unsigned long long>(light), 100.0 * failureRate,
              100.0 * static_cast<double>(completePaths) / static_cast<double>(total));
  EXPECT_LT(failureRate, 0.001);
  EXPECT_GT(completePaths, (total * 95) / 100);
}

// (b) Recursion 1000 deep: the full chain is kept in every sample of the bottom procedure. Most
// samples of so deep a stack are throttled (a 1000-frame unwind is costly): the run is long
// enough to keep more than 50 even on a loaded machine (35-40 of 150 rounds were seen).
TEST(MeasureIntegration, DeepRecursion) {
  const fs::path dir = scratch("recursion") / "meas";
  ASSERT_EQ(run(kCspRun + " -o " + dir.string() + " -- " + kApps + "csp-app-recursion 1000 500 > /dev/null"), 0);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 1u);
  const auto& p = profiles[0];
  expectHealthy(p);
  EXPECT_EQ(p.identity.idTuple, (IdTuple{{IdKind::Process, 0}, {IdKind::Thread, 0}}));
  test::LeafSymbolizer sym;
  std::uint64_t bottom = 0, deep = 0;
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    const std::uint32_t leaf = p.values.node[v];
    if (sym.procedure(p, p.cct.frame[leaf]) != "bottom_work") continue;
    bottom += p.values.count[v];
    std::size_t recurseFrames = 0;
    for (std::uint32_t n = p.cct.parent[leaf]; n != 0; n = p.cct.parent[n]) {
      // Interior offsets are return addresses: look up the call instruction before them.
      AddressFrame f = p.addressFrames[p.cct.frame[n]];
      ThreadProfile probe;
      probe.modules = p.modules;
      probe.addressFrames = {{f.module, f.offset - 1}};
      if (sym.procedure(probe, 0) == "recurse") ++recurseFrames;
    }
    // recurse(0) tail-calls bottom_work, so 1000 activations remain on the stack.
    if (recurseFrames >= 1000 && depthOf(p, leaf) >= 1001) deep += p.values.count[v];
  }
  EXPECT_GT(bottom, 50u);
  EXPECT_EQ(deep, bottom) << "every sample in bottom_work must carry the 1000 recurse frames";
  EXPECT_LE(p.stats.unwindFailures, p.stats.samples / 1000);
}

// (c) 64 short-lived threads, a fork, dlopen + dlclose of a working plugin, a SIGUSR1 handler,
// and a detached thread still running in regions at exit.
TEST(MeasureIntegration, ThreadChurnForkDlopen) {
  const fs::path dir = scratch("churn") / "meas";
  ASSERT_EQ(run(kCspRun + " -o " + dir.string() + " -- " + kApps + "csp-app-churn " + kBin +
                "/tests/apps/csp-app-plugin.so 64 > /dev/null"),
            0);
  const auto profiles = readAll(dir);
  test::LeafSymbolizer sym;
  std::set<std::uint64_t> parentThreads;
  std::uint32_t parentPid = 0;
  int children = 0;
  std::uint64_t childWork = 0, pluginWork = 0;
  bool pluginInMap = false;
  for (const auto& p : profiles) {
    expectHealthy(p);
    EXPECT_EQ(setting(p, "sampling-signal-taken-over"), "no");
    const auto& t = p.identity.idTuple;
    const auto leaves = leafProcedures(p, sym);
    if (t.size() == 2) {
      EXPECT_EQ(t[0], (IdElement{IdKind::Process, 0}));
      EXPECT_TRUE(parentThreads.insert(t[1].value).second);
      if (parentPid == 0) parentPid = p.identity.pid;
      EXPECT_EQ(p.identity.pid, parentPid);
      if (leaves.count("plugin_work")) pluginWork += leaves.at("plugin_work");
      if (t[1].value == 65) {
        ASSERT_GE(p.regions.size(), 2u) << "the spinner's regions";
        EXPECT_EQ(p.regions.names.at(p.regions.staticId[1]), "spin");
        EXPECT_GT(p.regions.count[1], 0u);
        EXPECT_LE(p.regions.unclosedAtExit, 1u);
      }
      for (const auto& m : p.modules)
        pluginInMap = pluginInMap || (m.path.find("csp-app-plugin.so") != std::string::npos && !m.buildId.empty());
    } else {
      ASSERT_EQ(t.size(), 3u) << formatIdTuple(t);
      EXPECT_EQ(t[1].kind, IdKind::Process);
      EXPECT_EQ(t[1].value, p.identity.pid) << "a fork child is named by its pid";
      EXPECT_EQ(t[2], (IdElement{IdKind::Thread, 0}));
      ++children;
      if (leaves.count("churn_child_work")) childWork += leaves.at("churn_child_work");
    }
  }
  EXPECT_EQ(parentThreads.size(), 66u) << "main thread + 64 threads + the spinner";
  EXPECT_EQ(*parentThreads.rbegin(), 65u);
  EXPECT_EQ(children, 1);
  EXPECT_GT(childWork, 10u) << "the child's own work must be in the child's profile";
  EXPECT_TRUE(pluginInMap) << "the dlclosed plugin must stay in the load map with its build-id";
  EXPECT_GT(pluginWork, 30u) << "samples in the dlopened plugin must resolve to plugin_work";
}

namespace {

struct Expected {
  std::uint64_t count = 0, ns = 0, insideNs = 0;  // clock read outside and inside the region calls
};

// thread -> region -> what the program measured itself
std::map<std::uint64_t, std::map<std::string, Expected>> readExpected(const fs::path& file) {
  std::map<std::uint64_t, std::map<std::string, Expected>> out;
  std::ifstream in(file);
  std::uint64_t thread = 0;
  std::string region;
  Expected e;
  while (in >> thread >> region >> e.count >> e.ns >> e.insideNs) out[thread][region] = e;
  return out;
}

}  // namespace

// (d) Regions: counts and times as the program saw them, the log, the straggler, misuse.
TEST(MeasureIntegration, RegionsWithStraggler) {
  const fs::path base = scratch("regions");
  const fs::path dir = base / "meas";
  ASSERT_EQ(run(kCspRun + " --region-log -o " + dir.string() + " -- " + kApps + "csp-app-regions " +
                (base / "expected.txt").string() + " 10 > /dev/null"),
            0);
  const auto expected = readExpected(base / "expected.txt");
  ASSERT_EQ(expected.size(), 8u);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 9u);
  std::map<std::uint64_t, std::uint64_t> samplesByThread;
  for (const auto& p : profiles) {
    const auto thread = idOf(p, IdKind::Thread);
    const auto& r = p.regions;
    samplesByThread[thread] = sampleCount(p);
    auto nameOf = [&](std::size_t node) { return r.names.at(r.staticId[node]); };
    if (thread == 0) {
      EXPECT_EQ(r.mismatchedEnds, 1u);
      EXPECT_EQ(r.unclosedAtExit, 1u);
      bool setup = false;
      for (std::size_t n = 1; n < r.size(); ++n) setup = setup || (nameOf(n) == "setup" && r.count[n] == 1);
      EXPECT_TRUE(setup) << "the numbered region registered as 'setup'";
      continue;
    }
    ASSERT_TRUE(expected.count(thread)) << thread;
    const auto& want = expected.at(thread);
    std::map<std::string, Expected> got;
    std::set<std::uint64_t> iterationIds;
    for (std::size_t n = 1; n < r.size(); ++n) {
      EXPECT_LE(r.exclusiveNs[n], r.inclusiveNs[n]);
      got[nameOf(n)].count += r.count[n];
      got[nameOf(n)].ns += r.inclusiveNs[n];
      if (nameOf(n) == "iteration") {
        EXPECT_EQ(r.parent[n], 0u);
        EXPECT_EQ(r.count[n], 1u);
        iterationIds.insert(r.dynamicId[n]);
      } else {
        EXPECT_EQ(nameOf(n), "compute");
        EXPECT_EQ(nameOf(r.parent[n]), "iteration") << "compute nests in iteration";
      }
    }
    EXPECT_EQ(iterationIds.size(), 10u);
    for (const char* name : {"iteration", "compute"}) {
      EXPECT_EQ(got[name].count, want.at(name).count) << name << " thread " << thread;
      // The program read its clock before each region began and after it ended (outside), and
      // after it began and before it ended (inside): the region's time lies between the two sums
      // however the 8 threads on 2 shared cores are preempted (1 µs: the clocks' granularity).
      const Expected& w = want.at(name);
      const double g = static_cast<double>(got[name].ns);
      EXPECT_LE(g, static_cast<double>(w.ns) + 1e3) << name << " thread " << thread;
      EXPECT_GE(g + 1e3, static_cast<double>(w.insideNs)) << name << " thread " << thread;
      EXPECT_GT(w.insideNs, 0u) << name << " thread " << thread;
    }
    // The log: an enter and an exit per visit, in time order, nothing lost.
    EXPECT_EQ(r.eventTimeNs.size(), 40u);
    EXPECT_EQ(r.eventsLost, 0u);
    EXPECT_EQ(r.mismatchedEnds, 0u);
    EXPECT_EQ(r.unclosedAtExit, 0u);
  }
  // The straggler (worker 7 = thread 8) does double work: about twice the CPU samples. (Its wall
  // time in "compute" is not a reliable oracle: with 9 threads on 2 shared cores the others'
  // regions stretch while they wait for a core, and the straggler's last iterations run alone.
  // Each thread's region times are checked against the program's own clock above.)
  std::vector<std::uint64_t> others;
  for (std::uint64_t t = 1; t < 8; ++t) others.push_back(samplesByThread[t]);
  std::sort(others.begin(), others.end());
  const double ratio = static_cast<double>(samplesByThread[8]) / static_cast<double>(others[3]);
  EXPECT_NEAR(ratio, 2.0, 0.5) << "straggler samples " << samplesByThread[8] << " median " << others[3];
}

// The event log is bounded: with room for 10 events, the rest are counted as lost.
TEST(MeasureIntegration, RegionLogIsBounded) {
  const fs::path base = scratch("regions-bounded");
  const fs::path dir = base / "meas";
  ASSERT_EQ(run("CSP_REGION_LOG=1 CSP_REGION_LOG_EVENTS=10 " + kCspRun + " -o " + dir.string() + " -- " + kApps +
                "csp-app-regions " + (base / "expected.txt").string() + " 10 > /dev/null"),
            0);
  for (const auto& p : readAll(dir)) {
    if (idOf(p, IdKind::Thread) == 0) continue;
    EXPECT_EQ(p.regions.eventTimeNs.size(), 10u);
    EXPECT_EQ(p.regions.eventsLost, 30u);
  }
}

// Without csp-run the region calls go to libcsp-regions' no-ops.
TEST(MeasureIntegration, RegionsWithoutMeasurement) {
  const fs::path base = scratch("regions-plain");
  const std::string out = (base / "stdout.txt").string();
  ASSERT_EQ(run("cd " + base.string() + " && " + kApps + "csp-app-regions expected.txt 2 > " + out), 0);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("measured: no"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(base) || !fs::exists(base / "csp-csp-app-regions"));
}

// The settings also work as plain environment variables, and real-time is a second metric.
TEST(MeasureIntegration, EnvironmentOnlyWithRealTime) {
  const fs::path dir = scratch("env") / "meas";
  ASSERT_EQ(run("LD_PRELOAD=" + kBin + "/measure/libcsp-measure.so CSP_OUTPUT=" + dir.string() +
                " CSP_EVENTS=cpu-time@200,real-time@100 " + kApps + "csp-app-compute 40 > /dev/null"),
            0);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 1u);
  const auto& p = profiles[0];
  ASSERT_EQ(p.metrics.size(), 2u);
  EXPECT_EQ(p.metrics[1].name, "real-time");
  EXPECT_EQ(p.metrics[1].period, 10'000'000u);
  std::uint64_t perMetric[2] = {0, 0};
  for (std::size_t v = 0; v < p.values.size(); ++v) perMetric[p.values.metric[v]] += p.values.count[v];
  EXPECT_GT(perMetric[0], 20u);
  EXPECT_GT(perMetric[1], 10u);
  EXPECT_EQ(setting(p, "events"), "cpu-time@200,real-time@100");
}

// With CSP_SIGNAL=PROF (csp samples with SIGPROF, as it used to by default), a program that
// installs its own SIGPROF handler keeps being sampled and is reported. GNU sort catches SIGPROF
// (to remove temporary files) and re-raises it with the default action: without the
// interposition the first sample would kill it. (By default csp samples with a real-time signal
// and sort's SIGPROF handler is simply sort's.)
TEST(MeasureIntegration, SamplingSignalTakeoverIsIntercepted) {
  const fs::path base = scratch("takeover");
  const fs::path dir = base / "meas";
  const std::string err = (base / "stderr.txt").string();
  const std::string in = (base / "in.txt").string(), out = (base / "out.txt").string();
  ASSERT_EQ(run("seq 1 200000 | sort -R > " + in), 0);
  ASSERT_EQ(run("CSP_SIGNAL=PROF " + kCspRun + " -e cpu-time@1000 -e real-time@1000 -o " + dir.string() +
                " -- sort -n --parallel=2 " + in + " -o " + out + " 2> " + err),
            0);
  EXPECT_EQ(run("seq 1 200000 | cmp - " + out), 0) << "sort's output must be complete";
  const auto profiles = readAll(dir);
  ASSERT_FALSE(profiles.empty());
  std::uint64_t samples = 0;
  for (const auto& p : profiles) {
    EXPECT_EQ(setting(p, "sampling-signal"), "SIGPROF");
    EXPECT_EQ(setting(p, "sampling-signal-taken-over"), "intercepted");
    samples += sampleCount(p);
  }
  EXPECT_GT(samples, 10u);
  std::ifstream errIn(err);
  std::stringstream text;
  text << errIn.rdbuf();
  EXPECT_NE(text.str().find("installs its own handler for SIGPROF"), std::string::npos) << text.str();

  // A SIGPROF the program sends itself reaches the program's handler (bash's trap).
  const std::string trapOut = (base / "trap.txt").string();
  ASSERT_EQ(run("CSP_SIGNAL=PROF " + kCspRun + " -o " + (base / "meas2").string() +
                " -- bash -c 'trap \"echo caught\" PROF; kill -PROF $$; true' > " + trapOut + " 2> /dev/null"),
            0);
  std::ifstream trapIn(trapOut);
  std::stringstream trapText;
  trapText << trapIn.rdbuf();
  EXPECT_NE(trapText.str().find("caught"), std::string::npos);

  // By default, sort's SIGPROF handler is sort's own business.
  ASSERT_EQ(run(kCspRun + " -o " + (base / "meas3").string() + " -- sort -n --parallel=2 " + in + " -o " + out +
                " 2> " + err),
            0);
  EXPECT_EQ(run("seq 1 200000 | cmp - " + out), 0);
  for (const auto& p : readAll(base / "meas3")) EXPECT_EQ(setting(p, "sampling-signal-taken-over"), "no");
}

// Every rank's profiles record the job's rank count (setting mpi-ranks, from MPI_Comm_size or
// the launcher), so that csp-prof-mpi names the last ranks when they left no profile: a gap at
// the end of the numbering is invisible otherwise.
TEST(MeasureIntegration, RankCountIsRecordedSoMissingRanksAreNamed) {
  const fs::path base = scratch("mpi-ranks");
  const fs::path dir = base / "meas";
  ASSERT_EQ(run("timeout -k 5 120 env " + kMpirun + " -np 3 " + kCspRun + " -o " + dir.string() + " -- " + kApps +
                "csp-app-mpi-split 4 1 > /dev/null"),
            0);
  for (const auto& p : readAll(dir)) EXPECT_EQ(setting(p, "mpi-ranks"), "3") << formatIdTuple(p.identity.idTuple);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("r000002")) fs::remove(e.path());
  const std::string err = (base / "stderr.txt").string();
  ASSERT_EQ(run("timeout -k 5 120 " + kBin + "/launcher/csp-prof-mpi -q " + dir.string() + " -o " +
                (base / "db").string() + " 2> " + err),
            0)
      << slurp(err);
  EXPECT_NE(slurp(err).find("csp-prof-mpi: warning: 1 of 3 ranks left no profile (rank 2)"), std::string::npos)
      << slurp(err);
}

// csp-run names the default directory after the program and the job (here: the pid).
TEST(MeasureIntegration, CspRunDefaultDirectoryAndErrors) {
  const fs::path base = scratch("cli");
  ASSERT_EQ(run("cd " + base.string() + " && " + kCspRun + " -- " + kApps + "csp-app-compute 4 > /dev/null"), 0);
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(base)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("csp-csp-app-compute-", 0) == 0) {
      ++dirs;
      EXPECT_EQ(storage::listProfiles(e.path()).size(), 1u);
    }
  }
  EXPECT_EQ(dirs, 1);
  EXPECT_EQ(run(kCspRun + " --help > /dev/null"), 0);
  EXPECT_EQ(run(kCspRun + " -e bogus-event -- true 2> /dev/null"), 2);
  EXPECT_EQ(run(kCspRun + " 2> /dev/null"), 2);
  EXPECT_EQ(run(kCspRun + " -o " + base.string() + "/x -- /nonexistent/program 2> /dev/null"), 127);
}

// csp-run accepts exactly what the library can sample (`-e none`, documented, samples nothing)
// and refuses the rest as usage errors, naming the option: the library would otherwise ignore
// an event with a warning and sample cpu-time@200 instead (cpu-time@200000 used to exit 0).
TEST(MeasureIntegration, CspRunEventsAreCheckedLikeTheLibraryReadsThem) {
  const fs::path base = scratch("cli-events");
  const std::string err = (base / "stderr.txt").string();
  ASSERT_EQ(run("timeout -k 5 60 " + kCspRun + " -e none -o " + (base / "none").string() + " -- " + kApps +
                "csp-app-compute 4 > /dev/null 2> " + err),
            0)
      << slurp(err);
  const auto none = readAll(base / "none");
  ASSERT_EQ(none.size(), 1u);
  EXPECT_TRUE(none[0].metrics.empty()) << "no event sampled";
  EXPECT_EQ(none[0].stats.samples, 0u);
  for (const std::string bad : {"cpu-time@200000", "cpu-time@0", "real-time@5us", "real-time@3601s", "cpu-time@1x",
                                "none -e cpu-time", "cpu-time -e cpu", "bogus"}) {
    EXPECT_EQ(
        run("timeout -k 5 60 " + kCspRun + " -e " + bad + " -o " + (base / "bad").string() + " -- true 2> " + err), 2)
        << bad;
    const std::string text = slurp(err);
    EXPECT_NE(text.find("csp-run: error: --event"), std::string::npos) << bad << ": " << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << bad << ": one line: " << text;
  }
  EXPECT_FALSE(fs::exists(base / "bad")) << "nothing is created for a refused command";
  for (const std::string good : {"cpu-time@100000", "real-time@10us", "cpu@1s", "wall@3600s"})
    EXPECT_EQ(run("timeout -k 5 60 " + kCspRun + " -e " + good + " -o " + (base / "good").string() + " -- true"), 0)
        << good;
}

// exec is survived: a shell that runs the app in a child and then execs it leaves two profiles
// of the app, the exec'd child's marked with its pid so that the id tuples stay unique.
TEST(MeasureIntegration, ExecIsSurvived) {
  const fs::path dir = scratch("exec") / "meas";
  const std::string app = kApps + "csp-app-compute";
  ASSERT_EQ(run(kCspRun + " -o " + dir.string() + " -- /bin/sh -c '" + app + " 20 >/dev/null; exec " + app +
                " 20 >/dev/null'"),
            0);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 2u);
  std::set<IdTuple> tuples;
  for (const auto& p : profiles) {
    EXPECT_EQ(fs::path(p.identity.executable).filename(), "csp-app-compute");
    EXPECT_GT(sampleCount(p), 5u);
    tuples.insert(p.identity.idTuple);
  }
  EXPECT_EQ(tuples.size(), 2u);
  EXPECT_TRUE(tuples.count(IdTuple{{IdKind::Process, 0}, {IdKind::Thread, 0}}));
}

// Unusable events are reported and skipped; the rest are used.
TEST(MeasureIntegration, BadEventInEnvironmentIsSkipped) {
  const fs::path base = scratch("bad-event");
  const fs::path dir = base / "meas";
  const std::string err = (base / "stderr.txt").string();
  ASSERT_EQ(run("LD_PRELOAD=" + kBin + "/measure/libcsp-measure.so CSP_OUTPUT=" + dir.string() +
                " CSP_EVENTS=bogus,real-time@1ms " + kApps + "csp-app-compute 10 > /dev/null 2> " + err),
            0);
  const auto profiles = readAll(dir);
  ASSERT_EQ(profiles.size(), 1u);
  ASSERT_EQ(profiles[0].metrics.size(), 1u);
  EXPECT_EQ(profiles[0].metrics[0].name, "real-time");
  EXPECT_EQ(profiles[0].metrics[0].period, 1'000'000u);
  EXPECT_EQ(setting(profiles[0], "events"), "real-time@1ms") << "the events actually used";
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("ignoring event 'bogus'"), std::string::npos) << text.str();
}

// A thread that waits in the kernel is sampled by the real-time event all the while: the
// handler's throttle window (after a slow sample) runs on the event's clock, not on the thread's
// CPU time, which hardly advances while it sleeps (with a CPU-time window 95 % of a sleeping
// thread's samples were dropped).
TEST(MeasureIntegration, RealTimeSamplesOfASleepingThreadAreKept) {
  const fs::path base = scratch("sleep-real-time");
  ASSERT_EQ(run(kCspRun + " -e real-time@1ms -o " + base.string() + " -- sleep 1"), 0);
  const auto profiles = readAll(base);
  ASSERT_EQ(profiles.size(), 1u);
  const auto& p = profiles[0];
  const std::string throttled = setting(p, "throttled-samples");
  std::printf("sleep 1: %llu samples, %llu dropped (%s throttled)\n", static_cast<unsigned long long>(p.stats.samples),
              static_cast<unsigned long long>(p.stats.droppedSamples), throttled.c_str());
  EXPECT_GE(p.stats.samples, 900u);  // one per ms of the second
  EXPECT_LT(p.stats.droppedSamples, p.stats.samples / 10);
  EXPECT_EQ(p.stats.samples, sampleCount(p) + p.stats.droppedSamples);
}

// A period shorter than what a sample costs cannot stall the program. At 10 us (the shortest
// csp-run accepts) a signal and its unwind take longer than the period; on a VM whose timer
// interrupts are slow, the signals then came back to back and even `true` never got past its
// start-up (killed after 60 s). Now the timer is re-armed past the quiet time that follows a
// sample, so the handler's share stays about a fifth and the skipped periods count as throttled.
TEST(MeasureIntegration, PeriodsShorterThanASampleDoNotStallTheProgram) {
  const fs::path base = scratch("short-periods");
  for (const std::string event : {"real-time@10us", "cpu-time@10us"}) {
    const fs::path dir = base / event.substr(0, event.find('@'));
    ASSERT_EQ(run("timeout -k 5 120 " + kCspRun + " -e " + event + " -o " + dir.string() + " -- " + kApps +
                  "csp-app-compute 2 > /dev/null"),
              0)
        << event;
    const auto profiles = readAll(dir);
    ASSERT_EQ(profiles.size(), 1u);
    const auto& p = profiles[0];
    const std::string throttled = setting(p, "throttled-samples");
    std::printf("%s: %llu samples, %llu dropped (%s throttled)\n", event.c_str(),
                static_cast<unsigned long long>(p.stats.samples),
                static_cast<unsigned long long>(p.stats.droppedSamples), throttled.c_str());
    EXPECT_GT(sampleCount(p), 0u) << event;
    EXPECT_EQ(p.stats.samples, sampleCount(p) + p.stats.droppedSamples) << event;
    EXPECT_LE(throttled.empty() ? 0 : std::stoull(throttled), p.stats.droppedSamples) << event;
  }
}

// The per-thread limits hold and are reported: deeper samples keep their innermost frames and
// count as truncated; samples that need more CCT nodes than allowed are counted as dropped.
TEST(MeasureIntegration, DepthAndNodeLimits) {
  const fs::path base = scratch("limits");
  ASSERT_EQ(run(kCspRun + " --max-depth 100 -o " + (base / "depth").string() + " -- " + kApps +
                "csp-app-recursion 1000 40 > /dev/null"),
            0);
  auto profiles = readAll(base / "depth");
  ASSERT_EQ(profiles.size(), 1u);
  const auto& d = profiles[0];
  EXPECT_GT(d.stats.truncatedPaths, 0u);
  test::LeafSymbolizer sym;
  for (std::size_t v = 0; v < d.values.size(); ++v) {
    EXPECT_LE(depthOf(d, d.values.node[v]), 100u);
    if (depthOf(d, d.values.node[v]) == 100u) {  // a truncated path keeps the real leaf, not the outer frames
      const std::string leaf = sym.procedure(d, d.cct.frame[d.values.node[v]]);
      EXPECT_TRUE(leaf == "bottom_work" || leaf == "recurse") << leaf;
    }
  }

  // A path of ~2000 frames cannot fit into 1024 nodes.
  ASSERT_EQ(run(kCspRun + " --max-nodes 1024 -o " + (base / "nodes").string() + " -- " + kApps +
                "csp-app-recursion 2000 40 > /dev/null"),
            0);
  profiles = readAll(base / "nodes");
  ASSERT_EQ(profiles.size(), 1u);
  const auto& n = profiles[0];
  EXPECT_LE(n.cct.size(), 1024u);
  EXPECT_GT(n.stats.droppedSamples, 0u);
  EXPECT_EQ(n.stats.samples, sampleCount(n) + n.stats.droppedSamples);
}

namespace {

std::string output(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen((command + " 2>&1").c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    ::pclose(pipe);
  }
  return out;
}

TEST(MeasureIntegration, InfoNamesTheMeasuredProgramNotAHelper) {
  // A script runs `seq` (a helper that sorts first by name) and then the program: the database
  // names what csp-run ran, and lists the other executables.
  const fs::path base = scratch("program");
  const fs::path meas = base / "meas", db = base / "db";
  ASSERT_EQ(run(kCspRun + " -o " + meas.string() + " -- sh -c 'seq 1 200000 > /dev/null; " + kApps +
                "csp-app-compute > /dev/null'"),
            0);
  std::set<std::string> executables;
  for (const auto& p : readAll(meas)) executables.insert(fs::path(p.identity.executable).filename().string());
  ASSERT_TRUE(executables.count("seq")) << "the helper must have been measured too";
  ASSERT_EQ(run(kBin + "/launcher/csp-prof-mpi -q " + meas.string() + " -o " + db.string()), 0);
  const auto info = output(kBin + "/launcher/csp-views --info " + db.string());
  EXPECT_NE(info.find("program      sh -c seq 1 200000 > /dev/null; " + kApps + "csp-app-compute > /dev/null\n"),
            std::string::npos)
      << info;
  EXPECT_NE(info.find("executables  "), std::string::npos) << info;
  EXPECT_NE(info.find("seq (1 thread)"), std::string::npos) << info;
  EXPECT_NE(info.find("measured processes "), std::string::npos) << info;
  const auto summary = output(kBin + "/launcher/csp-prof-mpi " + meas.string() + " -o " + (base / "db2").string());
  EXPECT_NE(summary.find("post-processing ranks 1"), std::string::npos) << summary;
  fs::remove_all(base);
}

}  // namespace
