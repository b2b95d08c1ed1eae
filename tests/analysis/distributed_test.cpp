// Across processes (docs/query.md "Across processes"): tests/apps/mpi_causal.cpp measured with
// csp-run --region-log under a real mpirun, rank 1's clock offset by 7 s and skewed by 300 ppm on
// purpose (CSP_TEST_CLOCK_SKEW), reduced with csp-prof-mpi, then: the consolidated
// communication events of the database against the true times, frames across processes
// (csp-query --global) against the overlap computed from the true clocks, and dCOZ's what-if
// (csp-query --what-if) against the speed-up measured by running the program with R faster.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/storage/clock.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_io.hpp"

using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
namespace fs = std::filesystem;
using namespace csp;

namespace {

constexpr std::int64_t kOffsetNs = 7'000'000'000;
constexpr double kPpm = 300;
const std::string kSkew = "CSP_TEST_CLOCK_SKEW=1:7000000000:300";

std::int64_t trueTime(std::int64_t rank, std::uint64_t local) {
  if (rank != 1) return static_cast<std::int64_t>(local);
  return std::llround((static_cast<long double>(local) - kOffsetNs) / (1 + kPpm / 1e6L));
}

// Measures mpi_causal ARGS on `ranks` ranks into dir/m and reduces it into dir/db.
void measureAndReduce(const fs::path& dir, int ranks, const std::string& env, const std::string& args) {
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-mpi-causal";
  auto r = run(env + " timeout -k 5 120 " + csp::test::mpirun(ranks) + tool("csp-run") + " --region-log -o " +
               (dir / "m").string() + " -- " + app + " " + args);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("timeout -k 5 300 " + tool("csp-prof-mpi") + " -q " + (dir / "m").string() + " -o " + (dir / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
}

// csp-query --format json; stderr (notes) dropped.
nlohmann::json query(const fs::path& db, const std::string& args, int expectStatus = 0) {
  const auto r = run("(" + tool("csp-query") + " " + db.string() + " " + args + " --format json 2>/dev/null)");
  EXPECT_EQ(r.status, expectStatus) << args << "\n" << r.output;
  if (r.status != 0) return {};
  return nlohmann::json::parse(r.output);
}

double row(const nlohmann::json& j, const std::string& name, std::size_t column = 0) {
  for (const auto& r : j["rows"])
    if (r["name"] == name) return r["values"][column].is_null() ? -1 : r["values"][column].get<double>();
  ADD_FAILURE() << "no row " << name << " in " << j.dump();
  return -1;
}

// Rank -> its profiles (all threads).
std::map<std::int64_t, std::vector<ThreadProfile>> profilesByRank(const fs::path& meas) {
  std::map<std::int64_t, std::vector<ThreadProfile>> out;
  for (const auto& path : storage::listProfiles(meas)) {
    ThreadProfile p = storage::readProfile(path);
    for (const auto& e : p.identity.idTuple)
      if (e.kind == IdKind::Rank) out[static_cast<std::int64_t>(e.value)].push_back(std::move(p));
  }
  return out;
}

// The visits [enter, exit) of region `name` in a thread's log, in true time.
std::vector<std::pair<std::int64_t, std::int64_t>> visits(const ThreadProfile& p, std::int64_t rank,
                                                          const std::string& name) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const auto& r = p.regions;
  for (std::size_t i = 0; i < r.eventTimeNs.size(); ++i) {
    if (r.names[r.staticId[r.eventNode[i]]] != name) continue;
    if (r.eventIsEnter[i])
      out.emplace_back(trueTime(rank, r.eventTimeNs[i]), 0);
    else
      out.back().second = trueTime(rank, r.eventTimeNs[i]);
  }
  return out;
}

TEST(Distributed, ConsolidatedEventsHoldTheirTrueTimesAndCausality) {
  TempDir tmp("dcsp-consolidate");
  measureAndReduce(tmp.path(), 4, kSkew, "4 20 5");
  auto db = storage::Database::open(tmp / "db");
  const auto clocks = db->processClocks();
  ASSERT_EQ(clocks.size(), 4u);
  std::map<std::int64_t, std::vector<storage::CommEventRecord>> byRank;
  std::uint64_t widest = 0, tightened = 0;
  for (const auto& c : clocks) {
    EXPECT_EQ(c.clock.state, c.rank == 0   ? ClockState::Reference
                             : c.rank == 1 ? ClockState::Measured
                                           : ClockState::SameClock);
    EXPECT_EQ(c.conflicts, 0u);
    tightened += c.tightened;
    for (const auto& e : db->commEvents(c.process)) {
      // Every stored interval holds the event's true time (rounding: 1 ns).
      EXPECT_LE(static_cast<std::int64_t>(e.begin.lo), trueTime(c.rank, e.localBeginNs) + 1);
      EXPECT_GE(static_cast<std::int64_t>(e.begin.hi), trueTime(c.rank, e.localBeginNs) - 1);
      EXPECT_LE(static_cast<std::int64_t>(e.end.lo), trueTime(c.rank, e.localEndNs) + 1);
      EXPECT_GE(static_cast<std::int64_t>(e.end.hi), trueTime(c.rank, e.localEndNs) - 1);
      if (c.rank != 1) {
        EXPECT_EQ(e.begin.width(), 0u);  // rank 0's clock: exact
      }
      widest = std::max({widest, e.begin.width(), e.end.width()});
      byRank[c.rank].push_back(e);
    }
  }
  // Causality: each receive's end is not before its send's begin; a barrier's exit is not
  // before any member's entry.
  std::map<std::uint64_t, const storage::CommEventRecord*> sends;
  for (const auto& e : byRank[1])
    if (e.kind == CommKind::Send) sends[e.sequence] = &e;
  std::size_t matched = 0;
  for (const auto& e : byRank[0])
    if (e.kind == CommKind::Recv) {
      ASSERT_TRUE(sends.count(e.sequence));
      EXPECT_GE(e.end.lo, sends[e.sequence]->begin.lo);
      EXPECT_LE(sends[e.sequence]->begin.hi, e.end.hi);
      ++matched;
    }
  EXPECT_EQ(matched, 4u);
  std::map<std::uint64_t, std::uint64_t> lastEntry;
  for (const auto& [rank, events] : byRank)
    for (const auto& e : events)
      if (e.kind == CommKind::Collective) lastEntry[e.sequence] = std::max(lastEntry[e.sequence], e.begin.lo);
  for (const auto& [rank, events] : byRank)
    for (const auto& e : events)
      if (e.kind == CommKind::Collective) {
        EXPECT_GE(e.end.lo, lastEntry[e.sequence]) << "rank " << rank;
      }
  std::printf("widest consolidated interval %llu ns; %llu bounds narrowed by causality\n",
              static_cast<unsigned long long>(widest), static_cast<unsigned long long>(tightened));

  // The same database from two csp-prof-mpi ranks.
  const auto r = run("timeout -k 5 300 " + csp::test::mpirun(2) + tool("csp-prof-mpi") + " -q " + (tmp / "m").string() +
                     " -o " + (tmp / "db2").string());
  ASSERT_EQ(r.status, 0) << r.output;
  db.reset();
  EXPECT_EQ(csp::test::dumpDatabase(tmp / "db"), csp::test::dumpDatabase(tmp / "db2"));
}

TEST(Distributed, GlobalFramesSeeTheOverlapOfTwoProcesses) {
  TempDir tmp("dcsp-frames");
  measureAndReduce(tmp.path(), 3, kSkew, "4 30 10");
  const std::string overlap = "'Duration(exists t: (t, R) and exists u: (u, Q))'";
  // Within a process, R and Q never overlap (they are on different ranks).
  const auto local = query(tmp / "db", overlap);
  for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(row(local, "value", c), 0);
  const double global = row(query(tmp / "db", "--global " + overlap), "value");

  // The truth, from the local times and the known skew; and how far the bounds let it move.
  auto ranks = profilesByRank(tmp / "m");
  const auto q = visits(ranks[0].front(), 0, "Q");
  const auto rv = visits(ranks[1].front(), 1, "R");
  ASSERT_EQ(q.size(), 4u);
  ASSERT_EQ(rv.size(), 4u);
  std::int64_t truth = 0, qTotal = 0;
  for (const auto& a : q) {
    qTotal += a.second - a.first;
    for (const auto& b : rv)
      truth += std::max<std::int64_t>(0, std::min(a.second, b.second) - std::max(a.first, b.first));
  }
  std::uint64_t slack = 4;
  const ThreadProfile& r1 = ranks[1].front();
  for (auto t : r1.regions.eventTimeNs) slack += storage::toReference(r1.clock, t)->width() + 2;
  std::printf("overlap: true %lld ns, from the bounds %.0f ns, allowed error %llu ns (Q total %lld ns)\n",
              static_cast<long long>(truth), global, static_cast<unsigned long long>(slack),
              static_cast<long long>(qTotal));
  // The program's structure: R (30 ms) overlaps Q (10 ms) after each barrier. Not by how much:
  // in a loaded suite run the ranks left the barriers so far apart that R covered 18 of the 54 ms
  // of Q. Some overlap keeps the comparison below from being between two zeros.
  EXPECT_GT(truth, 0);
  EXPECT_LE(std::abs(global - static_cast<double>(truth)), static_cast<double>(slack));

  // Threads are numbered across processes: rank r's thread t is r * 1000 + t. Every event takes
  // place at the start of its aggregate, so a visit of R keeps a duration exactly when its exit's
  // bounds lie above its entry's (nothing of rank 1 happens inside R to chain the two): the
  // bounds are a few ms wide on this machine, but a round trip of the clock exchange on a loaded,
  // oversubscribed node once took 308 ms, and then R's visits (30 ms) vanish from the frames.
  bool separated = false;
  const auto& log = r1.regions;
  for (std::size_t i = 0; i + 1 < log.eventTimeNs.size(); ++i)
    if (log.names[log.staticId[log.eventNode[i]]] == "R" && log.eventIsEnter[i] && !log.eventIsEnter[i + 1])
      separated = separated || storage::toReference(r1.clock, log.eventTimeNs[i + 1])->lo >
                                   storage::toReference(r1.clock, log.eventTimeNs[i])->hi;
  const auto perThread = query(tmp / "db", "--global 'Duration((t, R))'");
  EXPECT_EQ(row(perThread, "t=0"), 0);
  const auto straggler = query(tmp / "db", "--global --canned straggler R recv");
  if (separated) {
    EXPECT_GT(row(perThread, "t=1000"), 0);
    // Canned analyses run across processes too: rank 1's R is the straggler while rank 0 waits in recv.
    EXPECT_EQ(row(straggler, "straggler-thread"), 1000);
    EXPECT_GT(row(straggler, "straggler-degree"), 0);
  } else {
    std::printf("rank 1's bounds are wider than R's visits: R has no duration in the frames\n");
    EXPECT_EQ(row(perThread, "t=1000"), 0);
  }
}

namespace {

// Rank -> its communication events of `kind` (all threads), in log order.
std::map<std::int64_t, std::vector<std::pair<std::size_t, const ThreadProfile*>>> eventsByRank(
    const std::map<std::int64_t, std::vector<ThreadProfile>>& profiles, CommKind kind) {
  std::map<std::int64_t, std::vector<std::pair<std::size_t, const ThreadProfile*>>> out;
  for (const auto& [rank, threads] : profiles)
    for (const auto& t : threads)
      for (std::size_t i = 0; i < t.commLog.size(); ++i)
        if (t.commLog.kind[i] == static_cast<std::uint8_t>(kind)) out[rank].emplace_back(i, &t);
  return out;
}

// Same inputs -> same database for 1 and 2 csp-prof-mpi ranks (dir/db from one).
void expectSameDatabaseFromTwoRanks(const fs::path& dir) {
  const auto r = run("timeout -k 5 300 " + csp::test::mpirun(2) + tool("csp-prof-mpi") + " -q " + (dir / "m").string() +
                     " -o " + (dir / "db2").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(csp::test::dumpDatabase(dir / "db"), csp::test::dumpDatabase(dir / "db2"));
}

// The widths of the converted communication events of a database: how far a bound may be from
// the truth (rank 0 is the reference, rank 2 shares its clock; the skewed rank's widths grow with
// the machine's load, which stretches the ping-pongs that bound its clock).
double widths(const fs::path& db) {
  double slack = 0;
  auto d = storage::Database::open(db);
  for (const auto& c : d->processClocks())
    for (const auto& e : d->commEvents(c.process)) slack += static_cast<double>(e.begin.width() + e.end.width());
  return slack;
}

// Rank 0's receives waiting for rank 1's sends, by the true clocks of the run (-1 when the logs
// do not hold `iterations` of each).
double lateSenderTruth(const fs::path& measurement, std::size_t iterations) {
  const auto profiles = profilesByRank(measurement);
  auto recvs = eventsByRank(profiles, CommKind::Recv);
  auto sends = eventsByRank(profiles, CommKind::Send);
  EXPECT_EQ(recvs[0].size(), iterations);
  EXPECT_EQ(sends[1].size(), iterations);
  if (recvs[0].size() != iterations || sends[1].size() != iterations) return -1;
  double lateSender = 0;
  for (std::size_t k = 0; k < iterations; ++k) {
    const auto [ri, r] = recvs[0][k];
    const auto [si, s] = sends[1][k];
    const std::int64_t end = trueTime(0, r->commLog.endNs[ri]), begin = trueTime(0, r->commLog.beginNs[ri]);
    lateSender +=
        static_cast<double>(std::max<std::int64_t>(0, std::min(trueTime(1, s->commLog.beginNs[si]), end) - begin));
  }
  return lateSender;
}

}  // namespace

// Rank 0's late-sender bounds (--mpi-waits) hold the truth of the same run up to the rounding of
// each of `events` bounds to ns, and the lower one is below it by at most the widths of the
// converted events; ranks 1 and 2 receive nothing.
void expectLateSenderBounds(const nlohmann::json& j, double truth, double slack, int events) {
  std::printf("late sender: truth %.0f ns, bounds [%.0f, %.0f]; widths of the converted events %.0f ns\n", truth,
              row(j, "late-sender lower", 0), row(j, "late-sender upper", 0), slack);
  EXPECT_GT(truth, 0);
  EXPECT_LE(row(j, "late-sender lower", 0), truth + 2 * events);
  EXPECT_GE(row(j, "late-sender upper", 0), truth - 2 * events);
  EXPECT_GE(row(j, "late-sender lower", 0), truth - slack - 2 * events);
  EXPECT_EQ(row(j, "late-sender upper", 1), 0);
  EXPECT_EQ(row(j, "late-sender upper", 2), 0);
}

TEST(Distributed, MpiWaitsNameTheLateSenderAndTheWaitingRank) {
  TempDir tmp("dcsp-waits");
  constexpr int kIterations = 4;
  // A loaded machine can delay rank 0 past rank 1's sends in every iteration (once beside the
  // sanitizer build of a cold CI run: a late-sender truth of 0 ns): such a run, which has no late
  // sender to find, is measured again (at most 3 runs).
  fs::path dir;
  for (int attempt = 0; attempt < 3; ++attempt) {
    dir = tmp / ("run" + std::to_string(attempt));
    fs::create_directories(dir);
    measureAndReduce(dir, 3, kSkew, "4 30 10");
    if (::testing::Test::HasFatalFailure()) return;
    if (lateSenderTruth(dir / "m", kIterations) > 0) break;
  }
  const auto j = query(dir / "db", "--mpi-waits");
  ASSERT_EQ(j["processes"].size(), 3u);  // ranks 0, 1, 2
  for (const std::string figure : {"late-sender", "late-receiver", "collective-wait"})
    for (std::size_t c = 0; c < 3; ++c) EXPECT_LE(row(j, figure + " lower", c), row(j, figure + " upper", c));
  // The truths, from the true clocks of the same run (a loaded machine stretches the sleeps, so
  // nominal times cannot be compared with): rank 0's receives waiting for rank 1's sends (R 30 ms
  // against Q 10 ms), every rank's barrier waits for the last entry, and who entered last.
  const auto profiles = profilesByRank(dir / "m");
  const double lateSender = lateSenderTruth(dir / "m", kIterations);
  std::map<std::uint64_t, std::map<std::int64_t, std::int64_t>> barriers;  // instance -> rank -> true entry
  for (const auto& [rank, events] : eventsByRank(profiles, CommKind::Collective))
    for (const auto& [i, t] : events) barriers[t->commLog.sequence[i]][rank] = trueTime(rank, t->commLog.beginNs[i]);
  std::map<std::int64_t, double> barrierWait, enteredLast;
  for (const auto& [seq, byRank] : barriers) {
    std::int64_t last = 0;
    for (const auto& [rank, entry] : byRank) last = std::max(last, entry);
    for (const auto& [rank, entry] : byRank) {
      barrierWait[rank] += static_cast<double>(last - entry);
      enteredLast[rank] += entry == last ? 1 : 0;
    }
  }
  const double slack = widths(dir / "db");
  expectLateSenderBounds(j, lateSender, slack, kIterations);
  for (std::size_t c = 0; c < 3; ++c) {
    const auto rank = static_cast<std::int64_t>(c);
    EXPECT_LE(row(j, "collective-wait lower", c), barrierWait[rank] + 2 * (kIterations + 1)) << c;
    EXPECT_GE(row(j, "collective-wait upper", c), barrierWait[rank] - 2 * (kIterations + 1)) << c;
    EXPECT_GE(row(j, "collective-wait lower", c), barrierWait[rank] - slack - 2 * (kIterations + 1)) << c;
    EXPECT_LE(row(j, "straggler certain", c), enteredLast[rank]) << c;
    EXPECT_GE(row(j, "straggler possible", c), enteredLast[rank]) << c;
    EXPECT_EQ(row(j, "collectives", c), kIterations + 1);
    EXPECT_EQ(row(j, "barrier count", c), kIterations + 1);
  }
  EXPECT_GT(barrierWait[2], 0);  // rank 2 (S, 5 ms) waits in barriers for ranks 0 and 1
}

namespace {

// dCOZ on mpi_causal MODE: R -25 % predicted from the slow run against the fast run's measured
// speed-up, Q's ~0, R first in the ranking.
//
// The fast run differs from the slow one by 25 % of R and by what the machine did to each, and
// each difference is measured:
// - R's sleeps overshoot (R took fastR, not 0.75 slowR);
// - the rest of the run (barriers, messages, start-up) took a different time;
// - the runs' critical paths differ: a delay that a loaded machine put off R's path, within R's
//   slack, makes the analysis of that run predict less than all of R's cut (the cut would expose
//   it), and the other run need not have it. Each run's analysis measures its own share of R's
//   cut that shortens it (its prediction over the most a 25 % cut can give): 1 on a quiet machine.
//   Once, beside the sanitizer build of a cold CI run, the slow run's share was 0.84 (predicted
//   19.10 % of 22.76 % at most) while the fast run realized all of it.
// A pair disturbed by more than 5 points, or whose slow run put Q on its critical path (Q, delayed
// beyond its slack beside a sanitizer build, once predicted 1.75 %), is measured again: at most 8
// pairs (5 took 23 s in that CI run), and the least disturbed one is checked. A systematic error of
// the analysis moves both runs' shares alike, so it still fails the check.
void checkWhatIf(const std::string& name, const std::string& mode) {
  TempDir tmp(name);
  struct Pair {
    fs::path dir;
    nlohmann::json onPath, offPath;  // the slow run's --what-if 'R=-25%' and 'Q=-25%'
    double slowRun = 0, slowR = 0, fastRun = 0, fastR = 0, overshoot = 0, rest = 0, paths = 0;
    double disturbance() const { return overshoot + rest + paths; }
    bool qOffPath() const { return std::abs(row(offPath, "predicted speed-up")) <= 0.01; }
    bool betterThan(const Pair& other) const {
      if (qOffPath() != other.qOffPath()) return qOffPath();
      return disturbance() < other.disturbance();
    }
  };
  // The most a 25 % cut of R can shorten a run (%), and the share of it that does, by the run's
  // own analysis.
  auto mostOf = [](const nlohmann::json& whatIf) {
    return 100 * 0.25 * row(whatIf, "region compute time") / row(whatIf, "run time");
  };
  auto shareOfCut = [&](const nlohmann::json& whatIf) {
    const double most = mostOf(whatIf);
    return most > 0 ? row(whatIf, "predicted speed-up") / most : 0.0;
  };
  Pair best;
  for (int attempt = 0; attempt < 8; ++attempt) {
    Pair pair;
    pair.dir = tmp / ("pair" + std::to_string(attempt));
    fs::create_directories(pair.dir / "slow");
    fs::create_directories(pair.dir / "fast");
    measureAndReduce(pair.dir / "slow", 3, "", mode + "6 60 10 0");
    measureAndReduce(pair.dir / "fast", 3, "", mode + "6 60 10 25");
    if (::testing::Test::HasFatalFailure()) return;
    pair.onPath = query(pair.dir / "slow" / "db", "--what-if 'R=-25%'");
    pair.offPath = query(pair.dir / "slow" / "db", "--what-if 'Q=-25%'");
    const auto fast = query(pair.dir / "fast" / "db", "--what-if 'R=-25%'");
    pair.slowRun = row(pair.onPath, "run time");
    pair.slowR = row(pair.onPath, "region compute time");
    pair.fastRun = row(fast, "run time");
    pair.fastR = row(fast, "region compute time");
    pair.overshoot = 100 * std::abs(pair.fastR - 0.75 * pair.slowR) / pair.slowRun;
    pair.rest = 100 * std::abs((pair.slowRun - pair.slowR) - (pair.fastRun - pair.fastR)) / pair.slowRun;
    pair.paths = mostOf(pair.onPath) * std::abs(shareOfCut(pair.onPath) - shareOfCut(fast));
    std::printf(
        "%spair %d: disturbances: R's overshoot %.2f points, the rest %.2f points, the critical paths %.2f points "
        "(shares of R's cut: slow run %.3f, fast run %.3f); Q -25%%: %.3f %%\n",
        mode.c_str(), attempt, pair.overshoot, pair.rest, pair.paths, shareOfCut(pair.onPath), shareOfCut(fast),
        row(pair.offPath, "predicted speed-up"));
    if (attempt == 0 || pair.betterThan(best)) best = pair;
    if (best.disturbance() <= 5 && best.qOffPath()) break;
  }
  const fs::path slowDb = best.dir / "slow" / "db";
  const nlohmann::json& onPath = best.onPath;
  const double measured = 100 * (best.slowRun - best.fastRun) / best.slowRun;
  const double predicted = row(onPath, "predicted speed-up");
  const double most = mostOf(onPath);
  std::printf("%sR -25%%: predicted %.2f %% [%.2f, %.2f], measured %.2f %%, at most %.2f %%; Q -25%%: %.3f %%\n",
              mode.c_str(), predicted, row(onPath, "speed-up lower bound"), row(onPath, "speed-up upper bound"),
              measured, most, row(best.offPath, "predicted speed-up"));
  EXPECT_GT(predicted, 0);
  EXPECT_LE(predicted, most + 1e-9);
  EXPECT_LE(row(onPath, "speed-up lower bound"), predicted);
  EXPECT_GE(row(onPath, "speed-up upper bound"), predicted);
  // Right up to the disturbances and 5 % of the prediction (not of the measurement: a loaded fast
  // run can come out slower than the slow one, measured -1.7 % once, with the rest of its run
  // 24.8 points longer).
  EXPECT_NEAR(predicted, measured, 0.05 * predicted + best.disturbance());
  EXPECT_NEAR(row(best.offPath, "predicted speed-up"), 0, 0.01);
  // The ranking puts R first.
  const auto ranking = query(slowDb, "--what-if-rank=-25%");
  ASSERT_FALSE(ranking["rows"].empty());
  EXPECT_EQ(ranking["rows"][0]["name"], "R");
}

}  // namespace

TEST(Distributed, WhatIfPredictsTheSpeedUpOfTheCriticalPathOnly) { checkWhatIf("dcsp-whatif", ""); }

// The same critical path with MPI_Irecv from MPI_ANY_SOURCE / MPI_Wait and MPI_Isend /
// MPI_Waitall: the wait on rank 0 is elastic like a blocking receive's.
TEST(Distributed, WhatIfFollowsNonBlockingMessages) { checkWhatIf("dcsp-whatif-nb", "nonblocking "); }

// Non-blocking messages are matched: rank 0's MPI_Irecv (any source, any tag, status ignored)
// takes its peer and tag from the status, and --mpi-waits bounds the late sender's wait, counted
// from the start of the MPI_Wait, by the truth computed from the true clocks.
TEST(Distributed, NonBlockingMessagesNameTheLateSender) {
  TempDir tmp("dcsp-nonblocking");
  constexpr int kIterations = 4;
  measureAndReduce(tmp.path(), 3, kSkew, "nonblocking 4 30 10");
  const auto profiles = profilesByRank(tmp / "m");
  const auto recvs = eventsByRank(profiles, CommKind::Recv);
  const auto sends = eventsByRank(profiles, CommKind::Send);
  ASSERT_EQ(recvs.count(0), 1u);
  ASSERT_EQ(sends.count(1), 1u);
  ASSERT_EQ(recvs.at(0).size(), static_cast<std::size_t>(kIterations));
  ASSERT_EQ(sends.at(1).size(), static_cast<std::size_t>(kIterations));
  // The truth: per message, from the start of rank 0's MPI_Wait to the start of rank 1's
  // MPI_Isend (or the end of the wait, if earlier), on the true clock.
  double truth = 0;
  for (int k = 0; k < kIterations; ++k) {
    const auto [ri, r] = recvs.at(0)[static_cast<std::size_t>(k)];
    const auto [si, s] = sends.at(1)[static_cast<std::size_t>(k)];
    EXPECT_EQ(r->commLog.peer[ri], 1);
    EXPECT_EQ(r->commLog.tag[ri], 5);
    EXPECT_EQ(r->commLog.sequence[ri], s->commLog.sequence[si]);
    EXPECT_GT(r->commLog.waitBeginNs[ri], r->commLog.beginNs[ri]);  // posted before Q, waited after
    const std::int64_t waitBegin = trueTime(0, r->commLog.waitBeginNs[ri]);
    const std::int64_t sendBegin = trueTime(1, s->commLog.beginNs[si]);
    truth += static_cast<double>(
        std::max<std::int64_t>(0, std::min(sendBegin, trueTime(0, r->commLog.endNs[ri])) - waitBegin));
  }
  const auto j = query(tmp / "db", "--mpi-waits");
  const double slack = widths(tmp / "db");
  expectLateSenderBounds(j, truth, slack, kIterations);
  expectSameDatabaseFromTwoRanks(tmp.path());
}

// Rooted collectives (mpi_causal rooted): each collective is named, and each member's wait is
// bounded by the true wait for what it waits for only: a bcast's non-roots for the root's entry
// (the root for nobody), a reduce's root for every entry (its other members for nobody), a
// scan's member for those of lower rank.
TEST(Distributed, RootedCollectivesWaitForTheirRootOnly) {
  TempDir tmp("dcsp-rooted");
  constexpr int kIterations = 4;
  measureAndReduce(tmp.path(), 3, kSkew, "rooted 4 30 10");
  const auto profiles = profilesByRank(tmp / "m");
  const auto colls = eventsByRank(profiles, CommKind::Collective);
  // Instance -> per rank its true entry, for each kind.
  std::map<std::uint8_t, std::map<std::uint64_t, std::map<std::int64_t, std::int64_t>>> entries;
  for (const auto& [rank, events] : colls)
    for (const auto& [i, t] : events)
      entries[t->commLog.op[i]][t->commLog.sequence[i]][rank] = trueTime(rank, t->commLog.beginNs[i]);
  const auto bcast = static_cast<std::uint8_t>(CollectiveOp::Bcast);
  const auto reduce = static_cast<std::uint8_t>(CollectiveOp::Reduce);
  ASSERT_EQ(entries[bcast].size(), static_cast<std::size_t>(kIterations));
  ASSERT_EQ(entries[reduce].size(), static_cast<std::size_t>(kIterations));
  std::map<std::int64_t, double> bcastTruth, reduceTruth;
  for (const auto& [seq, byRank] : entries[bcast])
    for (const auto& [rank, entry] : byRank)
      if (rank != 1) bcastTruth[rank] += static_cast<double>(std::max<std::int64_t>(0, byRank.at(1) - entry));
  for (const auto& [seq, byRank] : entries[reduce]) {
    std::int64_t last = 0;
    for (const auto& [rank, entry] : byRank) last = std::max(last, entry);
    reduceTruth[0] += static_cast<double>(last - byRank.at(0));
  }
  const auto j = query(tmp / "db", "--mpi-waits");
  const double slack = widths(tmp / "db");
  std::printf("bcast waits: rank 0 %.0f ns, rank 2 %.0f ns; reduce root %.0f ns; widths %.0f ns\n", bcastTruth[0],
              bcastTruth[2], reduceTruth[0], slack);
  for (std::size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(row(j, "bcast count", c), kIterations);
    EXPECT_EQ(row(j, "reduce count", c), kIterations);
  }
  EXPECT_GT(bcastTruth[0], 0);
  for (std::size_t c : {0u, 2u}) {
    const double truth = bcastTruth[static_cast<std::int64_t>(c)];
    EXPECT_LE(row(j, "bcast wait lower", c), truth + 2 * kIterations) << c;
    EXPECT_GE(row(j, "bcast wait upper", c), truth - 2 * kIterations) << c;
    EXPECT_GE(row(j, "bcast wait lower", c), truth - slack - 2 * kIterations) << c;
  }
  EXPECT_EQ(row(j, "bcast wait upper", 1), 0);  // the root waits for nobody
  EXPECT_LE(row(j, "reduce wait lower", 0), reduceTruth[0] + 2 * kIterations);
  EXPECT_GE(row(j, "reduce wait upper", 0), reduceTruth[0] - 2 * kIterations);
  EXPECT_EQ(row(j, "reduce wait upper", 1), 0);  // non-roots: MPI orders nothing
  EXPECT_EQ(row(j, "reduce wait upper", 2), 0);
  // A scan's member waits for the members of lower rank only.
  const auto scan = static_cast<std::uint8_t>(CollectiveOp::Scan);
  ASSERT_EQ(entries[scan].size(), static_cast<std::size_t>(kIterations));
  std::map<std::int64_t, double> scanTruth;
  for (const auto& [seq, byRank] : entries[scan])
    for (const auto& [rank, entry] : byRank) {
      std::int64_t last = entry;
      for (const auto& [lower, other] : byRank)
        if (lower < rank) last = std::max(last, other);
      scanTruth[rank] += static_cast<double>(last - entry);
    }
  EXPECT_EQ(row(j, "scan wait upper", 0), 0);
  for (std::size_t c : {1u, 2u}) {
    const double truth = scanTruth[static_cast<std::int64_t>(c)];
    EXPECT_LE(row(j, "scan wait lower", c), truth + 2 * kIterations) << c;
    EXPECT_GE(row(j, "scan wait upper", c), truth - 2 * kIterations) << c;
  }
  // R is on the critical path through the broadcast only.
  const auto w = query(tmp / "db", "--what-if 'R=-25%'");
  EXPECT_GT(row(w, "predicted speed-up"), 0);
  expectSameDatabaseFromTwoRanks(tmp.path());
}

TEST(Distributed, AProcessWithoutClockDataIsRefusedByName) {
  TempDir tmp("dcsp-noclock");
  measureAndReduce(tmp.path(), 2, kSkew + " CSP_TEST_CLOCK_DROP=1", "2 5 1");
  for (const std::string args : {"--global 'Duration((t, R))'", "--what-if 'R=-20%'"}) {
    const auto r = run(tool("csp-query") + " " + (tmp / "db").string() + " " + args);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("no clock data"), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  // Each process alone still answers.
  const auto local = query(tmp / "db", "'Duration((t, R))'");
  EXPECT_GT(row(local, "t=0", 1), 0);
}

TEST(Distributed, WithoutFinalizeTheBoundsRestOnAnAssumptionAndSaySo) {
  TempDir tmp("dcsp-nofinalize");
  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-mpi-causal";
  // mpirun reports the missing MPI_Finalize and fails; the profiles are written at exit.
  run(kSkew + " timeout -k 5 120 " + csp::test::mpirun(2) + tool("csp-run") + " --region-log -o " +
      (tmp / "m").string() + " -- " + app + " 2 5 1 0 nofinalize");
  auto r =
      run("timeout -k 5 300 " + tool("csp-prof-mpi") + " -q " + (tmp / "m").string() + " -o " + (tmp / "db").string());
  ASSERT_EQ(r.status, 0) << r.output;
  {
    auto db = storage::Database::open(tmp / "db");
    for (const auto& c : db->processClocks()) {
      EXPECT_EQ(c.clock.state, c.rank == 0 ? ClockState::Reference : ClockState::InitOnly);
      for (const auto& e : db->commEvents(c.process)) {  // 300 ppm is within the assumed 500
        EXPECT_LE(static_cast<std::int64_t>(e.begin.lo), trueTime(c.rank, e.localBeginNs) + 1);
        EXPECT_GE(static_cast<std::int64_t>(e.begin.hi), trueTime(c.rank, e.localBeginNs) - 1);
      }
    }
  }
  r = run(tool("csp-query") + " " + (tmp / "db").string() + " --global 'Duration((t, R))'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("not guaranteed"), std::string::npos) << r.output;
}

TEST(Distributed, BadWhatIfIsOneClearLine) {
  TempDir tmp("dcsp-badwhatif");
  measureAndReduce(tmp.path(), 2, "", "1 2 1");
  for (const std::string args : {"--what-if 'R=-0%'", "--what-if 'R'", "--what-if 'nosuch=-10%'",
                                 "--what-if 'R=-10%' 'Duration((t, R))'", "--what-if-rank=150%"}) {
    const auto r = run(tool("csp-query") + " " + (tmp / "db").string() + " " + args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find("what-if"), std::string::npos) << r.output;
  }
}

}  // namespace
