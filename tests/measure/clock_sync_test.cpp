// Clocks across processes and communication events (docs/measurement.md "Clocks across
// processes"): csp-run --region-log under a real mpirun on tests/apps/mpi_causal.cpp, one rank's
// clock offset and skewed on purpose (CSP_TEST_CLOCK_SKEW), so that the true time of every local
// reading is known and the bounds can be checked against it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/test_support.hpp"
#include "csp/storage/clock.hpp"
#include "csp/storage/profile_io.hpp"

namespace fs = std::filesystem;
using namespace csp;

namespace {

const std::string kBin = CSP_BINARY_DIR;
const std::string kMpirun =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 timeout -k 5 120 "
    "mpirun --oversubscribe";

// Rank 1's clock in the skewed runs: true * (1 + 300 ppm) + 7 s.
constexpr std::int64_t kOffsetNs = 7'000'000'000;
constexpr double kPpm = 300;
const std::string kSkew = "CSP_TEST_CLOCK_SKEW=1:7000000000:300";

std::int64_t trueTime(std::uint64_t local) {
  return std::llround((static_cast<long double>(local) - kOffsetNs) / (1 + kPpm / 1e6L));
}

fs::path scratch(const std::string& name) { return csp::test::scratchDir("clock-" + name); }

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Main-thread profile of each rank.
std::map<std::uint64_t, ThreadProfile> measure(const fs::path& dir, int ranks, const std::string& env,
                                               const std::string& args = "4 30 10") {
  const std::string cmd = env + " " + kMpirun + " -np " + std::to_string(ranks) + " " + kBin +
                          "/launcher/csp-run --region-log -o " + dir.string() + " -- " + kBin +
                          "/tests/apps/csp-app-mpi-causal " + args + " > " + (dir / "out.txt").string() + " 2>&1";
  EXPECT_EQ(run(cmd), 0) << cmd;
  std::map<std::uint64_t, ThreadProfile> byRank;
  for (const auto& path : storage::listProfiles(dir)) {
    ThreadProfile p = storage::readProfile(path);
    std::uint64_t rank = ~0ull, thread = ~0ull;
    for (const auto& e : p.identity.idTuple) {
      if (e.kind == IdKind::Rank) rank = e.value;
      if (e.kind == IdKind::Thread) thread = e.value;
    }
    if (thread == 0) byRank[rank] = std::move(p);
  }
  EXPECT_EQ(byRank.size(), static_cast<std::size_t>(ranks));
  return byRank;
}

std::string regionName(const ThreadProfile& p, std::uint32_t node) {
  if (node == 0 || node >= p.regions.size()) return "";
  return p.regions.names[p.regions.staticId[node]];
}

TEST(ClockSync, SkewedRankIsBoundedAroundItsTrueTime) {
  const fs::path dir = scratch("skew");
  auto ranks = measure(dir, 3, kSkew);
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[0].clock.state, ClockState::Reference);
  EXPECT_EQ(ranks[2].clock.state, ClockState::SameClock);  // same kernel as rank 0: no messages, exact
  const ClockSync& c = ranks[1].clock;
  ASSERT_EQ(c.state, ClockState::Measured);
  // The trapped readings: the true time of the local reading lies in the reference interval.
  EXPECT_LE(static_cast<std::int64_t>(c.initRefLoNs), trueTime(c.initLocalNs) + 1);
  EXPECT_GE(static_cast<std::int64_t>(c.initRefHiNs), trueTime(c.initLocalNs) - 1);
  EXPECT_LE(static_cast<std::int64_t>(c.finalRefLoNs), trueTime(c.finalLocalNs) + 1);
  EXPECT_GE(static_cast<std::int64_t>(c.finalRefHiNs), trueTime(c.finalLocalNs) - 1);
  // The relative frequency interval holds the true one.
  const auto f = storage::relativeFrequency(c);
  EXPECT_LE(f.lo, 1 / (1 + kPpm / 1e6));
  EXPECT_GE(f.hi, 1 / (1 + kPpm / 1e6));
  // Every region event of rank 1 converts to an interval holding its true time.
  const auto& r = ranks[1].regions;
  ASSERT_FALSE(r.eventTimeNs.empty());
  std::uint64_t widest = 0;
  for (auto local : r.eventTimeNs) {
    const auto in = storage::toReference(c, local);
    ASSERT_TRUE(in.has_value());
    EXPECT_LE(static_cast<std::int64_t>(in->lo), trueTime(local)) << local;
    EXPECT_GE(static_cast<std::int64_t>(in->hi), trueTime(local)) << local;
    widest = std::max(widest, in->width());
  }
  std::printf("zero widths %llu ns and %llu ns, widest converted event %llu ns, frequency [%.9f, %.9f]\n",
              static_cast<unsigned long long>(c.initRefHiNs - c.initRefLoNs),
              static_cast<unsigned long long>(c.finalRefHiNs - c.finalRefLoNs), static_cast<unsigned long long>(widest),
              f.lo, f.hi);
}

// The exchanges are at most 64 ping-pong rounds at MPI_Init and MPI_Finalize (8 when the round
// trips are short), whatever the run's length: their cost does not grow with the program. What they cost in CPU time is
// a benchmark figure, not a test's (tests/bench/comm_overhead.sh; 0.02-0.5 % of these runs on an idle machine): Open
// MPI polls while rank 0 waits for a rank the scheduler has not run yet, and four oversubscribed ranks on a loaded
// two-core machine made rank 0's share 3.4 % once.
TEST(ClockSync, ExchangesTakeABoundedNumberOfRoundsWhateverTheRunLength) {
  for (const std::string args : {"2 5 1", "6 40 10"}) {
    const fs::path dir = scratch("cost-" + std::to_string(args.size()));
    auto ranks = measure(dir, 4, kSkew, args);
    ASSERT_EQ(ranks.size(), 4u);
    for (auto& [rank, p] : ranks) {
      const std::uint64_t runNs = p.identity.endTimeNs - p.identity.startTimeNs;
      ASSERT_GT(runNs, 0u);
      std::printf("%s: rank %llu: exchanges %llu ns of CPU time in a %llu ns run (%.3f %%)\n", args.c_str(),
                  static_cast<unsigned long long>(rank), static_cast<unsigned long long>(p.clock.costNs),
                  static_cast<unsigned long long>(runNs),
                  100.0 * static_cast<double>(p.clock.costNs) / static_cast<double>(runNs));
      if (rank <= 1) {  // rank 0 exchanged with rank 1, the one rank of another clock
        EXPECT_GE(p.clock.rounds, 8u) << "rank " << rank;
        EXPECT_LE(p.clock.rounds, 64u) << "rank " << rank;
      } else {
        EXPECT_EQ(p.clock.rounds, 0u) << "rank " << rank;  // rank 0's clock: no exchange
      }
      EXPECT_GT(p.clock.costNs, 0u) << "rank " << rank;  // the exchanges ran and were timed
      EXPECT_LT(p.clock.costNs, runNs) << "rank " << rank;
      const auto expected = rank == 0   ? ClockState::Reference
                            : rank == 1 ? ClockState::Measured
                                        : ClockState::SameClock;
      EXPECT_EQ(p.clock.state, expected) << "rank " << rank;  // rank 1 alone runs a skewed clock
    }
  }
}

TEST(ClockSync, WithoutRegionLogNothingIsExchanged) {
  const fs::path dir = scratch("off");
  const std::string cmd = kMpirun + " -np 2 " + kBin + "/launcher/csp-run -o " + dir.string() + " -- " + kBin +
                          "/tests/apps/csp-app-mpi-causal 2 5 1 > /dev/null 2>&1";
  ASSERT_EQ(run(cmd), 0);
  for (const auto& path : storage::listProfiles(dir)) {
    const ThreadProfile p = storage::readProfile(path);
    EXPECT_EQ(p.clock.state, ClockState::None);
    EXPECT_EQ(p.commLog.size(), 0u);
  }
}

TEST(CommEvents, SendsReceivesAndCollectivesAreNumbered) {
  const fs::path dir = scratch("comm");
  constexpr int kIterations = 4;
  auto ranks = measure(dir, 3, kSkew, std::to_string(kIterations) + " 20 5");
  ASSERT_EQ(ranks.size(), 3u);
  std::map<std::uint64_t, std::vector<std::uint64_t>> sendSeq, recvSeq;
  for (auto& [rank, p] : ranks) {
    const CommLog& m = p.commLog;
    std::uint64_t collectives = 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      EXPECT_LE(m.beginNs[i], m.endNs[i]);
      switch (static_cast<CommKind>(m.kind[i])) {
        case CommKind::Send:
          EXPECT_EQ(rank, 1u);
          EXPECT_EQ(m.peer[i], 0);
          EXPECT_EQ(m.tag[i], 5);
          EXPECT_EQ(m.comm[i], 0u);  // MPI_COMM_WORLD
          sendSeq[rank].push_back(m.sequence[i]);
          break;
        case CommKind::Recv:
          EXPECT_EQ(rank, 0u);
          EXPECT_EQ(m.peer[i], 1);
          EXPECT_EQ(m.tag[i], 5);
          EXPECT_EQ(regionName(p, m.region[i]), "recv");  // the calling context
          recvSeq[rank].push_back(m.sequence[i]);
          break;
        case CommKind::Collective:
          EXPECT_EQ(m.peer[i], -1);  // a barrier
          EXPECT_EQ(m.op[i], static_cast<std::uint8_t>(CollectiveOp::Barrier));
          EXPECT_EQ(m.tag[i], static_cast<std::int32_t>(rank));  // its rank in MPI_COMM_WORLD
          EXPECT_EQ(m.sequence[i], collectives++);
          break;
        default:
          ADD_FAILURE() << "unexpected kind " << int{m.kind[i]};
      }
    }
    EXPECT_EQ(collectives, kIterations + 1u) << "rank " << rank;  // the clock exchanges are not the program's
  }
  const std::vector<std::uint64_t> expected = {0, 1, 2, 3};
  EXPECT_EQ(sendSeq[1], expected);
  EXPECT_EQ(recvSeq[0], expected);
}

// mpi_causal nonblocking: rank 0's MPI_Irecv from MPI_ANY_SOURCE with MPI_ANY_TAG, waited for
// with MPI_STATUS_IGNORE, learns peer and tag from the status csp passes in its place; rank 1's
// MPI_Isend completed by MPI_Waitall is numbered when it starts; rank 2's message to itself
// (MPI_ANY_SOURCE, completed by MPI_Testany and MPI_Waitsome with statuses ignored) too. All
// begin at their start and wait from the completing call on; the waits record nothing else. A
// send whose request rank 2 frees is recorded too.
TEST(CommEvents, NonBlockingOperationsAreRecordedAtCompletion) {
  const fs::path dir = scratch("nonblocking");
  auto ranks = measure(dir, 3, "", "nonblocking 3 20 5");
  ASSERT_EQ(ranks.size(), 3u);
  for (auto& [rank, p] : ranks) {
    const CommLog& m = p.commLog;
    std::map<std::int32_t, std::vector<std::uint64_t>> sends, recvs;  // by tag
    for (std::size_t i = 0; i < m.size(); ++i) {
      const auto kind = static_cast<CommKind>(m.kind[i]);
      EXPECT_NE(kind, CommKind::Wait) << "rank " << rank;
      if (kind != CommKind::Send && kind != CommKind::Recv) continue;
      // Rank 0 receives from 1 (tag 5), rank 2 sends itself messages (tags 7 and 8: the blocking
      // receive of the freed send's message).
      EXPECT_EQ(m.peer[i], rank == 0 ? 1 : rank == 1 ? 0 : 2) << "rank " << rank;
      if (m.tag[i] != 8 || kind == CommKind::Send) {
        EXPECT_LT(m.beginNs[i], m.waitBeginNs[i]);
        EXPECT_LE(m.waitBeginNs[i], m.endNs[i]);
      }
      if (rank == 0) {
        EXPECT_EQ(regionName(p, m.region[i]), "recv");
      }
      (kind == CommKind::Send ? sends : recvs)[m.tag[i]].push_back(m.sequence[i]);
    }
    const std::vector<std::uint64_t> expected{0, 1, 2};
    using Tags = std::map<std::int32_t, std::vector<std::uint64_t>>;
    const Tags mine = rank == 2 ? Tags{{7, expected}, {8, expected}} : Tags{{5, expected}};
    EXPECT_EQ(sends, rank == 0 ? Tags{} : mine) << "rank " << rank;
    EXPECT_EQ(recvs, rank == 1 ? Tags{} : mine) << "rank " << rank;
  }
}

TEST(ClockSync, ASingleRankIsItsOwnReference) {
  const fs::path dir = scratch("single");
  auto ranks = measure(dir, 1, "", "2 5 1");
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].clock.state, ClockState::Reference);
  EXPECT_EQ(storage::toReference(ranks[0].clock, 12345)->width(), 0u);
}

TEST(ClockSync, DroppedClockDataIsStoredAsNone) {
  const fs::path dir = scratch("drop");
  auto ranks = measure(dir, 2, kSkew + " CSP_TEST_CLOCK_DROP=1", "2 5 1");
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].clock.state, ClockState::Reference);
  EXPECT_EQ(ranks[1].clock.state, ClockState::None);
}

}  // namespace
