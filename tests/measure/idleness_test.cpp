// Idleness accounting end to end (csp-run --idleness, csp-prof-mpi, csp-views; docs/measurement.md
// "Threads: work, idleness and waiting"): the test programs of tests/apps/threads.cpp and
// tests/apps/omp_imbalance.cpp, with what the thesis (§5.2.1, §5.2.2, §6.4) says they must show.
// Nothing here depends on timing: costs are CPU or wall-clock spans the programs measure
// themselves, and tolerances allow for sampling error with the number of samples taken.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/test_support.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_io.hpp"

namespace fs = std::filesystem;
using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

const std::string kApps = std::string(CSP_BINARY_DIR) + "/tests/apps/";
const std::string kTimeout = "timeout -k 5 300 ";  // a hang fails the test instead of stopping it

// A measured and post-processed run.
struct Run {
  std::string output;  // the program's output
  std::unique_ptr<storage::Database> db;
  fs::path meas, dbDir;
};

Run measure(const TempDir& dir, const std::string& options, const std::string& program,
            const std::string& proMpiOptions = "") {
  Run r;
  r.meas = dir / "meas";
  r.dbDir = dir / "db";
  const auto m =
      run(kTimeout + tool("csp-run") + " --idleness " + options + " -o " + r.meas.string() + " -- " + program);
  EXPECT_EQ(m.status, 0) << m.output;
  r.output = m.output;
  const auto p =
      run(kTimeout + tool("csp-prof-mpi") + " -q " + proMpiOptions + " " + r.meas.string() + " -o " + r.dbDir.string());
  EXPECT_EQ(p.status, 0) << p.output;
  if (p.status == 0) r.db = storage::Database::open(r.dbDir);
  return r;
}

std::optional<storage::MetricId> metricId(const storage::Database& db, const std::string& name) {
  const auto& ms = db.metrics();
  for (storage::MetricId m = 0; m < ms.size(); ++m)
    if (ms[m].descriptor.name == name) return m;
  return std::nullopt;
}

double sumOf(const storage::Database& db, storage::NodeId node, storage::MetricId metric, storage::MetricScope scope) {
  for (const auto& a : db.summaries(node))
    if (a.metric == metric && a.scope == scope)
      return static_cast<double>(metrics::decodeIntAccumulator(a.bytes).sum());
  return 0;
}

// Inclusive sum of `metric` (ns) over every procedure frame whose name contains `part` (the
// programs' procedures of interest have distinct names and do not nest in themselves).
double inclusive(const storage::Database& db, const std::string& part, const std::string& metric) {
  const auto m = metricId(db, metric);
  if (!m) return 0;
  const auto& s = db.metadata().strings;
  double total = 0;
  for (storage::NodeId id = 1; id < db.metadata().nodeCount; ++id) {
    const auto n = *db.node(id);
    if (n.kind == ScopeKind::ProcFrame && s[n.name].find(part) != std::string::npos)
      total += sumOf(db, id, *m, storage::MetricScope::Inclusive);
  }
  return total;
}

double total(const storage::Database& db, const std::string& metric) {
  const auto m = metricId(db, metric);
  return m ? sumOf(db, 0, *m, storage::MetricScope::Inclusive) : 0;
}

// Per profile: the thread index and the thread's total of `metric` (the root's inclusive value).
std::map<std::uint64_t, double> perThread(const storage::Database& db, const std::string& metric) {
  std::map<std::uint64_t, double> out;
  const auto m = metricId(db, metric);
  const auto& profiles = db.metadata().profiles;
  for (storage::ProfileId p = 0; p < profiles.size(); ++p) {
    std::uint64_t thread = ~0ull;
    for (const auto& e : profiles[p])
      if (e.kind == IdKind::Thread) thread = e.value;
    out[thread] = 0;
    if (!m) continue;
    for (const auto& v : db.nodeValues(0, *m, storage::MetricScope::Inclusive))
      if (v.profile == p) out[thread] = static_cast<double>(v.value);
  }
  return out;
}

std::string settingOf(const fs::path& meas, const std::string& key) {
  for (const auto& path : storage::listProfiles(meas)) {
    const auto p = storage::readProfile(path);
    for (const auto& s : p.identity.settings)
      if (s.key == key) return s.value;
  }
  return "";
}

// The sum of a numeric setting over the profiles.
double settingSum(const fs::path& meas, const std::string& key) {
  double sum = 0;
  for (const auto& path : storage::listProfiles(meas))
    for (const auto& s : storage::readProfile(path).identity.settings)
      if (s.key == key) sum += std::stod(s.value);
  return sum;
}

constexpr double kMs = 1e6;

// The database property csp-prof-mpi sets when OpenMP idleness was not measured, "" if none.
std::string openmpIdleness(const storage::Database& db) {
  for (const auto& p : db.metadata().properties)
    if (p.key == storage::kOpenmpIdlenessProperty) return p.value;
  return "";
}

// The hold time the blame programs print ("held N ns"), 0 if they did not.
double heldNs(const std::string& output) {
  std::smatch held;
  return std::regex_search(output, held, std::regex(R"(held (\d+) ns)")) ? std::stod(held[1]) : 0;
}

}  // namespace

// Thesis §6.4: one thread holds a mutex for a long critical section while three others wait for
// it. Its critical section is blamed for the waiting: about 3x its own time, at the context of
// its release; the waiters keep their own waiting as lock-wait. Real-time sampling: the holder's
// own time is then wall-clock time, like the waiting it is blamed for, whatever the load.
TEST(Idleness, LockHolderIsBlamedForThreeWaiters) {
  TempDir dir("idle-blame");
  const auto r = measure(dir, "-e real-time@1ms", kApps + "csp-app-threads blame 400");
  ASSERT_TRUE(r.db);
  const auto& db = *r.db;
  const double holdNs = heldNs(r.output);  // the critical section's own time, as the program measured it
  ASSERT_GT(holdNs, 0) << r.output;
  const double holderWork = inclusive(db, "hold_lock", "work");
  const double blame = inclusive(db, "hold_lock", "lock-blame");
  const double waited = inclusive(db, "wait_for_lock", "lock-wait");
  std::printf(
      "holder's critical section: held %.1f ms (work %.1f ms sampled), lock-blame %.1f ms (%.2fx); "
      "waiters' lock-wait %.1f ms\n",
      holdNs / kMs, holderWork / kMs, blame / kMs, blame / holdNs, waited / kMs);
  ASSERT_GE(holdNs, 400 * kMs);
  EXPECT_GE(blame / holdNs, 2.3);
  EXPECT_LE(blame / holdNs, 3.7);
  ASSERT_GE(holderWork, 100 * kMs) << "samples of 1 ms in the critical section";
  // Directed blame: the lock's blame lands on the holder, not spread over the program.
  EXPECT_GE(blame, 0.9 * total(db, "lock-blame"));
  // The victims' view: the three waiters waited about as long as the holder is blamed for.
  EXPECT_NEAR(waited / blame, 1.0, 0.2);
  EXPECT_GE(waited, 0.95 * total(db, "lock-wait"));
  // Thesis §5.2.1 alongside: the holder worked while the other four threads (the main thread
  // joins) were idle, so its critical section also carries about 4x its time as idleness.
  const double idleness = inclusive(db, "hold_lock", "idleness");
  EXPECT_GE(idleness / holderWork, 3.0);
  EXPECT_LE(idleness / holderWork, 4.05);

  // The same through csp-views: lock-blame is an ordinary metric.
  const auto v = run(tool("csp-views") + " --format json -m lock-blame,work --scope I -t 0 " + r.dbDir.string());
  ASSERT_EQ(v.status, 0) << v.output;
  const auto j = nlohmann::json::parse(v.output);
  double shown = -1;
  for (const auto& n : j["nodes"])
    if (n["name"].get<std::string>().find("hold_lock") != std::string::npos)
      shown = n["values"]["lock-blame:sum:I"].get<double>();
  EXPECT_DOUBLE_EQ(shown, blame);
}

// The same with a pthread spin lock: the waiters spin (and take CPU-time samples, which are
// not work: they are idle), and the holder is blamed for their spinning.
TEST(Idleness, SpinLockHolderIsBlamed) {
  TempDir dir("idle-spin");
  const auto r = measure(dir, "-e real-time@1ms", kApps + "csp-app-threads spin-blame 300");
  ASSERT_TRUE(r.db);
  const auto& db = *r.db;
  const double holdNs = heldNs(r.output);  // the critical section's own time, as the program measured it
  ASSERT_GT(holdNs, 0) << r.output;
  const double blame = inclusive(db, "hold_lock", "lock-blame");
  const double waited = inclusive(db, "wait_for_lock", "lock-wait");
  std::printf("spin lock held %.1f ms: lock-blame %.1f ms (%.2fx), waiters' lock-wait %.1f ms, waiters' work %.1f ms\n",
              holdNs / kMs, blame / kMs, blame / holdNs, waited / kMs, inclusive(db, "wait_for_lock", "work") / kMs);
  EXPECT_GE(blame / holdNs, 2.3);
  EXPECT_LE(blame / holdNs, 3.7);
  EXPECT_NEAR(waited / blame, 1.0, 0.2);
  // Spinning is idleness, not work: the waiters' samples in pthread_spin_lock are not charged.
  EXPECT_LE(inclusive(db, "wait_for_lock", "work"), 0.05 * waited);
}

// Many holds with the same three waiters (csp-app-threads blame-rounds / spin-blame-rounds), of
// 100 µs, 1 ms and 10 ms. Blame is timed, not sampled: a wait that outlasts the short wait is
// blamed in full, its short wait at the next release (the holder's), its hand-over after the
// last release at the release after that. A wait that ends within the short wait carries no
// blame; csp counts its lock-wait in the setting short-lock-wait-ns. So, whatever the load:
//  - all blame + short-lock-wait-ns = all lock-wait, but for the lock table's µs (one per wait),
//    the unattributed waiting and the releases' own time (the program measures it around each
//    release: a release preempted before csp reads the clock ends its waiters' blame late);
//  - the holder's blame is at most the waiters' waiting before its releases as the program
//    measures it (within 1 % and one µs per wait) plus, for each of the three waiters, the time
//    the holder took from reading the clock to the return of its release (a holder preempted
//    there releases later than it measured: 1.2 % more blame in a loaded CI run), and at least three quarters of it
//    less what ended within short waits: on an idle machine it is 98.5-100 %, but on a loaded one a waiter preempted
//    between the holder's release and its own wake-up makes the hand-over long, and that is blamed on the next release,
//    not the holder's (93-98 % with two CPU hogs on the two cores of the development machine).
// Before, a wait's blame began at its registration, which a timed futex wait of 20 µs makes
// 50-150 µs late: the holder got 39 % (100 µs holds), 91 % (1 ms), 98 % (10 ms) of that waiting.
// `fewer` divides the rounds: spinning waiters keep both CPUs of a small machine busy, and a hold
// then also waits for the scheduler to run the last waiter to arrive (tens of ms per round).
void checkBlameRounds(const std::string& mode, int fewer) {
  struct Case {
    int holdUs, rounds;
  };
  for (Case c : {Case{100, 600}, Case{1000, 160}, Case{10'000, 20}}) {
    c.rounds /= fewer;
    TempDir dir("idle-rounds");
    const auto r =
        measure(dir, "-e cpu-time@1ms",
                kApps + "csp-app-threads " + mode + " " + std::to_string(c.holdUs) + " " + std::to_string(c.rounds));
    ASSERT_TRUE(r.db);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        r.output, m,
        std::regex(
            R"(held (\d+) ns, waited (\d+) ns, waited-in-hold (\d+) ns, release-window (\d+) ns, all-release-window (\d+) ns)")))
        << r.output;
    const double held = std::stod(m[1]), waitedInHold = std::stod(m[3]), releaseWindow = std::stod(m[4]);
    const double allReleaseWindow = std::stod(m[5]);
    const double holderBlame = inclusive(*r.db, "hold_lock_round", "lock-blame");
    const double blame = total(*r.db, "lock-blame"), waited = total(*r.db, "lock-wait");
    const double shortWaits = settingSum(r.meas, "short-lock-wait-ns");
    // A thread's waits and blame short of one period in all have no context (docs).
    const double perWait = 3.0 * c.rounds * 1e3 + settingSum(r.meas, "unattributed-wait-ns");  // one µs per wait
    std::printf(
        "%s %d us x %d: held %.1f ms, waited in hold %.1f ms, holder's blame %.1f ms (%.4f); all blame %.2f ms + "
        "short waits %.2f ms = %.2f ms, lock-wait %.2f ms\n",
        mode.c_str(), c.holdUs, c.rounds, held / kMs, waitedInHold / kMs, holderBlame / kMs, holderBlame / waitedInHold,
        blame / kMs, shortWaits / kMs, (blame + shortWaits) / kMs, waited / kMs);
    // (A release preempted between the real unlock and csp's reading of the clock ends the blame
    // of up to three waiters that late, after they got the lock: 1.4 ms in 5.8 s once under load.)
    EXPECT_NEAR(blame + shortWaits, waited, perWait + 3 * allReleaseWindow) << c.holdUs << " us";
    EXPECT_GE(holderBlame, 0.75 * waitedInHold - shortWaits - perWait) << c.holdUs << " us";
    EXPECT_LE(holderBlame, 1.01 * waitedInHold + 3 * releaseWindow + perWait) << c.holdUs << " us";
    EXPECT_LE(holderBlame, 3 * held * 1.01) << "three waiters at most";
  }
}

TEST(Idleness, MutexBlameEqualsLockWaitForShortHolds) { checkBlameRounds("blame-rounds", 1); }
TEST(Idleness, SpinLockBlameEqualsLockWaitForShortHolds) { checkBlameRounds("spin-blame-rounds", 4); }

// Four threads hammering one mutex (tests/apps/threads.cpp `heavy`): most contended waits end
// within the first 20 µs, where the waiter keeps its own account and does not register with the
// lock (docs/measurement.md). They are lock-wait of the waiters all the same; only registered
// waits are blamed, so the blame never exceeds the lock-wait; every acquisition happened (the
// program checks its counter and fails otherwise).
TEST(Idleness, ShortLockWaitsAreLockWaitWithoutBlame) {
  TempDir dir("idle-heavy");
  const auto r = measure(dir, "-e cpu-time@1ms", kApps + "csp-app-threads heavy 4 300000");
  ASSERT_TRUE(r.db);
  ASSERT_NE(r.output.find("heavy: 1200000 acquisitions"), std::string::npos) << r.output;
  const double waited = inclusive(*r.db, "heavyWorker", "lock-wait");
  const double blame = inclusive(*r.db, "heavyWorker", "lock-blame");
  std::printf("heavy: lock-wait %.2f ms, lock-blame %.2f ms\n", waited / kMs, blame / kMs);
  // That the threads waited at all is not asserted: with a build on both cores the scheduler
  // once ran them without overlap and lock-wait was 0 (recording waits is what
  // LockHolderIsBlamedForThreeWaiters and MutexBlameEqualsLockWaitForShortHolds check).
  // lock-blame + short-lock-wait-ns = lock-wait holds up to one µs per wait and the credits left
  // at thread ends (docs/measurement.md, "Lock blame"): with ~10^5 waits beside two CPU hogs the
  // blame once came out 4.13 ms against 4.00 ms of waiting. Blame beyond the waiting by more
  // than that slack would be charged twice.
  EXPECT_LE(blame, waited * 1.05 + kMs);
}

// The lock wrappers keep every mutex kind's semantics under contention (the short wait is a
// timed acquisition on CLOCK_MONOTONIC; a priority-inheritance mutex may not offer one and then
// waits in the real call): the program prints the same lines with and without csp-run
// --idleness and checks its counters and the relock, error-checking and robust rules itself.
TEST(Idleness, EveryMutexKindKeepsItsSemantics) {
  const std::string program = kApps + "csp-app-threads kinds 20000";
  const auto plain = run(program);
  ASSERT_EQ(plain.status, 0) << plain.output;
  TempDir dir("idle-kinds");
  const auto measured =
      run(tool("csp-run") + " --idleness -e cpu-time@1ms -o " + (dir / "meas").string() + " -- " + program);
  EXPECT_EQ(measured.status, 0) << measured.output;
  EXPECT_EQ(measured.output, plain.output);
  EXPECT_NE(plain.output.find("errorcheck relock: EDEADLK"), std::string::npos) << plain.output;
  EXPECT_NE(plain.output.find("robust after owner died: EOWNERDEAD"), std::string::npos) << plain.output;
}

// A barrier where four threads arrive with unequal work ((i+1) units of CPU time each): the
// early threads' waiting at the barrier is what the program measures itself around
// pthread_barrier_wait (the difference of the work spans), charged as sync-wait at the
// barrier call; the last thread's work carries the idleness of the others (§5.2.1).
TEST(Idleness, BarrierImbalance) {
  TempDir dir("idle-barrier");
  const auto r = measure(dir, "-e cpu-time@1ms", kApps + "csp-app-threads barrier 40 3");
  ASSERT_TRUE(r.db);
  const auto& db = *r.db;
  std::map<std::uint64_t, double> programSays;  // thread index (main = 0) -> ns in the barrier
  const std::regex line(R"(barrier thread (\d): (\d+) ns)");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
    programSays[std::stoull((*it)[1]) + 1] = std::stod((*it)[2]);
  ASSERT_EQ(programSays.size(), 4u) << r.output;
  const auto syncWait = perThread(db, "sync-wait");
  const double period = 1 * kMs;
  for (const auto& [thread, ns] : programSays) {
    std::printf("thread %llu: barrier %.1f ms by the program, sync-wait %.1f ms by csp\n",
                static_cast<unsigned long long>(thread), ns / kMs, syncWait.at(thread) / kMs);
    // A thread's waits shorter than a period in total have no context of their own (docs).
    EXPECT_NEAR(syncWait.at(thread), ns, 0.05 * ns + 2 * period) << "thread " << thread;
  }
  EXPECT_GT(programSays.at(1), programSays.at(4)) << "the lightest thread waits longest";
  // The waiting is at the barrier: in barrierWorker (the call of pthread_barrier_wait), not in
  // the work.
  EXPECT_NEAR(inclusive(db, "barrierWorker", "sync-wait"), total(db, "sync-wait") - syncWait.at(0), 1 * period);
  EXPECT_EQ(inclusive(db, "work_share", "sync-wait"), 0.0);
  // Idleness goes to the work done while others wait: relative to its work, the heaviest thread
  // (working alone at the end) carries far more than the lightest one.
  const auto work = perThread(db, "work"), idleness = perThread(db, "idleness");
  for (std::uint64_t t = 1; t <= 4; ++t) ASSERT_GT(work.at(t), 20 * period) << "thread " << t;
  const double light = idleness.at(1) / work.at(1), heavy = idleness.at(4) / work.at(4);
  std::printf("idleness per work: lightest thread %.2f, heaviest %.2f\n", light, heavy);
  EXPECT_GT(heavy, 2 * light);
}

// OpenMP through OMPT (LLVM's libomp): a loop whose iteration 0 is long. While it runs the other
// three threads wait at the loop's barrier (I = 3, W = 1), so long_iteration gets 3x its work as
// idleness; serial_part between the loops runs while the three workers idle in the pool, and
// gets the same ratio. Thread states come from OMPT, not from the pthread wrappers.
TEST(Idleness, OpenMPLongIterationIsBlamed) {
  const std::string app = CSP_OMP_APP;
  if (app.empty()) GTEST_SKIP() << "no clang++ -fopenmp with libomp in this build (tests/apps/CMakeLists.txt)";
  TempDir dir("idle-omp");
  setenv("OMP_NUM_THREADS", "4", 1);
  const auto r = measure(dir, "-e cpu-time@1ms", app + " 300 5 100 2");
  unsetenv("OMP_NUM_THREADS");
  ASSERT_TRUE(r.db);
  const auto& db = *r.db;
  EXPECT_EQ(settingOf(r.meas, "openmp-tool").rfind("ompt (", 0), 0u) << settingOf(r.meas, "openmp-tool");
  EXPECT_EQ(settingOf(r.meas, "openmp-runtime").rfind("libomp.so", 0), 0u) << settingOf(r.meas, "openmp-runtime");
  EXPECT_EQ(openmpIdleness(db), "") << "OpenMP idleness was measured";
  for (const char* proc : {"long_iteration", "serial_part"}) {
    const double work = inclusive(db, proc, "work"), idleness = inclusive(db, proc, "idleness");
    std::printf("%s: work %.1f ms, idleness %.1f ms (%.2fx)\n", proc, work / kMs, idleness / kMs, idleness / work);
    ASSERT_GE(work, 150 * kMs) << proc;
    EXPECT_GE(idleness / work, 2.5) << proc;
    EXPECT_LE(idleness / work, 3.05) << proc;
  }
  // Nearly all idleness is blamed on those two contexts; the short iterations get little.
  const double blamed = inclusive(db, "long_iteration", "idleness") + inclusive(db, "serial_part", "idleness");
  EXPECT_GE(blamed, 0.85 * total(db, "idleness"));
  EXPECT_LE(inclusive(db, "short_iteration", "idleness"), 0.1 * total(db, "idleness"));
  // The workers' waits at the loop's barrier are sync-wait, in the runtime's code.
  EXPECT_GT(total(db, "sync-wait"), 100 * kMs);
  EXPECT_EQ(inclusive(db, "long_iteration", "sync-wait"), 0.0);
  // Effort = work + idleness, per context and in total.
  EXPECT_EQ(total(db, "effort"), total(db, "work") + total(db, "idleness"));

  // Fig. 5.1 in csp-views: high idleness, low overhead at the long iteration: refine granularity.
  const auto v = run(tool("csp-views") + " --effort --format json -t 0 " + r.dbDir.string());
  ASSERT_EQ(v.status, 0) << v.output;
  const auto j = nlohmann::json::parse(v.output);
  std::string note;
  for (const auto& n : j["nodes"])
    if (n["name"] == "long_iteration") note = n["note"].is_null() ? "" : n["note"].get<std::string>();
  EXPECT_EQ(note, "refine granularity");
}

// GCC's libgomp has no OMPT: the program runs as before, its threads are plain threads for csp
// (no OpenMP tool), and the waiting workers' spinning in libgomp is work that the default
// overhead rules classify as parallel overhead.
TEST(Idleness, GnuOpenMPWithoutOmpt) {
  const std::string app = kApps + "csp-app-omp-gnu";
  if (!fs::exists(app)) GTEST_SKIP() << "no OpenMP support in the C++ compiler of this build";
  TempDir dir("idle-gomp");
  // Spinning waits: libgomp spins only while it has no more threads than CPUs, so two threads.
  setenv("OMP_NUM_THREADS", "2", 1);
  setenv("OMP_WAIT_POLICY", "active", 1);
  setenv("GOMP_SPINCOUNT", "infinite", 1);
  const auto r = measure(dir, "-e cpu-time@1ms", app + " 150 5 20 2");
  unsetenv("OMP_NUM_THREADS");
  unsetenv("OMP_WAIT_POLICY");
  unsetenv("GOMP_SPINCOUNT");
  ASSERT_TRUE(r.db);
  EXPECT_EQ(settingOf(r.meas, "openmp-tool"), "none");
  const auto& db = *r.db;
  EXPECT_GT(total(db, "work"), 0.0);
  EXPECT_GT(total(db, "overhead"), 10 * kMs) << "workers spinning in libgomp";
  EXPECT_EQ(inclusive(db, "long_iteration", "overhead"), 0.0);

  // --overhead-rule replaces the rules: with none, no overhead; with one naming the program's
  // burn(), exactly the work of burn() (it calls nothing).
  const auto none =
      run(tool("csp-prof-mpi") + " -q --overhead-rule none " + r.meas.string() + " -o " + (dir / "db-none").string());
  ASSERT_EQ(none.status, 0) << none.output;
  EXPECT_EQ(total(*storage::Database::open(dir / "db-none"), "overhead"), 0.0);
  const auto mine = run(tool("csp-prof-mpi") + " -q --overhead-rule 'csp-app-omp-gnu:*burn*' " + r.meas.string() +
                        " -o " + (dir / "db-mine").string());
  ASSERT_EQ(mine.status, 0) << mine.output;
  const auto dbMine = storage::Database::open(dir / "db-mine");
  EXPECT_GT(total(*dbMine, "overhead"), 100 * kMs);
  EXPECT_EQ(total(*dbMine, "overhead"), inclusive(*dbMine, "burn", "work"));
  const auto bad =
      run(tool("csp-prof-mpi") + " -q --overhead-rule ':x' " + r.meas.string() + " -o " + (dir / "db-bad").string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("MODULE_GLOB"), std::string::npos) << bad.output;
}

// An OpenMP runtime that found no OpenMP tool (GCC's libgomp; LLVM's libomp with OMP_TOOL=disabled)
// leaves its threads plain threads to csp, working unless they wait in a wrapped pthread call: a
// loop where three of four threads wait for one long iteration (75 % of the loop's effort idle)
// shows no idleness with libgomp (its workers sleep in futexes of their own). The
// profiles name the runtime (openmp-runtime) beside openmp-tool = none, csp-prof-mpi records
// that OpenMP idleness was not measured, and csp-views --effort says so on every context instead
// of a reading (it read "effectively parallel" before).
TEST(Idleness, OpenMPWithoutToolSaysIdlenessWasNotMeasured) {
  struct Program {
    std::string path, runtime, ompTool;  // ompTool: OMP_TOOL
  };
  std::vector<Program> programs;
  if (fs::exists(kApps + "csp-app-omp-gnu")) programs.push_back({kApps + "csp-app-omp-gnu", "libgomp.so", ""});
  if (!std::string(CSP_OMP_APP).empty()) programs.push_back({CSP_OMP_APP, "libomp.so", "disabled"});
  if (programs.empty()) GTEST_SKIP() << "no OpenMP support in this build";
  setenv("OMP_NUM_THREADS", "4", 1);
  for (const auto& [program, runtime, ompTool] : programs) {
    TempDir dir("idle-notool");
    if (!ompTool.empty()) setenv("OMP_TOOL", ompTool.c_str(), 1);
    const auto r = measure(dir, "-e cpu-time@1ms", program + " 200 5 20 2");
    unsetenv("OMP_TOOL");
    ASSERT_TRUE(r.db) << program;
    EXPECT_EQ(settingOf(r.meas, "openmp-tool"), "none") << program;
    EXPECT_EQ(settingOf(r.meas, "openmp-runtime").rfind(runtime, 0), 0u) << settingOf(r.meas, "openmp-runtime");
    EXPECT_NE(openmpIdleness(*r.db).find("not measured: " + runtime), std::string::npos) << openmpIdleness(*r.db);

    // The JSON alone (run() adds stderr, where the warning goes).
    const auto v = run("{ " + kTimeout + tool("csp-views") + " --effort --format json -t 0 " + r.dbDir.string() +
                       " 2>/dev/null; }");
    ASSERT_EQ(v.status, 0) << v.output;
    std::set<std::string> notes;
    std::string longNote;
    const auto j = nlohmann::json::parse(v.output);
    for (const auto& n : j["nodes"]) {
      if (n["note"].is_null()) continue;
      notes.insert(n["note"].get<std::string>());
      if (n["name"] == "long_iteration") longNote = n["note"].get<std::string>();
    }
    EXPECT_EQ(notes, std::set<std::string>{"idleness not measured"}) << program;
    EXPECT_EQ(longNote, "idleness not measured") << program;
    const auto text = run(kTimeout + tool("csp-views") + " --effort " + r.dbDir.string());
    ASSERT_EQ(text.status, 0) << text.output;
    EXPECT_NE(text.output.find("warning: OpenMP idleness not measured: " + runtime), std::string::npos) << text.output;
    EXPECT_EQ(text.output.find("effectively parallel"), std::string::npos) << text.output;
  }
  unsetenv("OMP_NUM_THREADS");
}

// Without --idleness nothing changes: no state metrics, no OpenMP tool.
TEST(Idleness, OffByDefault) {
  TempDir dir("idle-off");
  const fs::path meas = dir / "meas";
  const auto m = run(tool("csp-run") + " -o " + meas.string() + " -- " + kApps + "csp-app-threads blame 20");
  ASSERT_EQ(m.status, 0) << m.output;
  std::set<std::string> names;
  for (const auto& path : storage::listProfiles(meas))
    for (const auto& d : storage::readProfile(path).metrics) names.insert(d.name);
  EXPECT_EQ(names, (std::set<std::string>{"cpu-time"}));
  EXPECT_EQ(settingOf(meas, "idleness"), "");
}
