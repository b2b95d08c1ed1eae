// csp-prof-mpi end to end: csp-gen inputs, real mpirun, real RocksDB; results checked against
// hand-computed values.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>

#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_builder.hpp"
#include "csp/storage/profile_io.hpp"

using namespace csp;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;

namespace {

// "main / loop main.c:10 / call main.c:16 / work / stmt work.c:3" -> node id.
std::map<std::string, storage::NodeId> pathIndex(const storage::Database& db) {
  const auto& s = db.metadata().strings;
  std::map<std::string, storage::NodeId> out;
  std::vector<std::pair<storage::NodeId, std::string>> stack{{0, ""}};
  while (!stack.empty()) {
    auto [id, path] = stack.back();
    stack.pop_back();
    out[path] = id;
    for (auto child : db.children(id)) {
      const auto n = *db.node(child);
      std::string label;
      switch (n.kind) {
        case ScopeKind::ProcFrame:
          label = s[n.name];
          break;
        case ScopeKind::Alien:
          label = "inlined " + s[n.name];
          break;
        case ScopeKind::Loop:
          label = "loop " + s[n.file] + ":" + std::to_string(n.line);
          break;
        case ScopeKind::CallSite:
          label = "call " + s[n.file] + ":" + std::to_string(n.line);
          break;
        case ScopeKind::Stmt:
          label = "stmt " + s[n.file] + ":" + std::to_string(n.line);
          break;
        case ScopeKind::Root:
          label = "root";
          break;
      }
      stack.emplace_back(child, path.empty() ? label : path + " / " + label);
    }
  }
  return out;
}

metrics::IntAccumulator summary(const storage::Database& db, storage::NodeId node, storage::MetricScope scope,
                                storage::MetricId metric = 0) {
  for (const auto& a : db.summaries(node))
    if (a.metric == metric && a.scope == scope) return metrics::decodeIntAccumulator(a.bytes);
  return {};
}

std::uint64_t summaryOfVisits(const storage::Database& db, storage::RegionId region) {
  for (const auto& a : db.regionSummaries(region))
    if (a.metric == 0) return static_cast<std::uint64_t>(metrics::decodeIntAccumulator(a.bytes).sum());
  return 0;
}

constexpr auto E = storage::MetricScope::Exclusive;
constexpr auto I = storage::MetricScope::Inclusive;

class Prof : public ::testing::Test {
 protected:
  TempDir dir{"prof"};

  std::filesystem::path fromJson(const std::string& name, const std::string& json) {
    const auto spec = dir / (name + ".json");
    std::ofstream(spec) << json;
    const auto meas = dir / (name + "-meas");
    auto r = run(tool("csp-gen") + " -q --from-json " + spec.string() + " -o " + meas.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return meas;
  }

  // `mpirunOptions`: "--bind-to none " for -j above 1 (mpirun binds each of one or two processes to
  // a core, where csp-prof-mpi runs one thread whatever -j says).
  std::unique_ptr<storage::Database> prof(const std::filesystem::path& meas, const std::string& name, int ranks = 1,
                                          const std::string& extra = "", const std::string& mpirunOptions = "") {
    const auto db = dir / name;
    auto r = run(csp::test::mpirun(ranks) + mpirunOptions + tool("csp-prof-mpi") + " -q " + extra + " " +
                 meas.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return storage::Database::open(db);
  }

  // csp-prof-mpi's output (its summary) on a csp-gen input of `shape`, under `launcher` ("": one
  // process), with `options`.
  test::RunResult summaryOf(const std::string& shape, const std::string& launcher, const std::string& options) {
    const auto meas = dir / "meas";
    const auto made = run("timeout -k 5 120 " + tool("csp-gen") + " -q --force " + shape + " -o " + meas.string());
    if (made.status != 0) return made;
    return run("timeout -k 5 120 " + launcher + tool("csp-prof-mpi") + " " + options + " " + meas.string() + " -o " +
               (dir / "db").string());
  }
};

TEST_F(Prof, Figure75ExclusiveInclusiveAndStatistics) {
  const auto meas = dir / "fig75";
  ASSERT_EQ(
      run(tool("csp-gen") + " -q --from-json " + std::string(CSP_TEST_DATA_DIR) + "/fig75.json -o " + meas.string())
          .status,
      0);
  auto db = prof(meas, "db");
  ASSERT_TRUE(db);
  EXPECT_EQ(db->metadata().profiles.size(), 2u);
  EXPECT_EQ(db->metadata().nodeCount, 11u);
  auto at = pathIndex(*db);
  const std::string main = "main", lx = main + " / loop main.c:10", ly = lx + " / loop main.c:11",
                    lz = ly + " / loop main.c:13", cs = lz + " / call main.c:16", work = cs + " / work";
  // Thread 1 has the counts of Fig. 7.5, thread 2 twice those: sums are 3x the figure.
  struct Expect {
    std::string path;
    std::uint64_t e, i;
  };
  for (const auto& x :
       {Expect{main, 11, 111}, Expect{lx, 0, 111}, Expect{ly, 1, 111}, Expect{lz, 10, 110}, Expect{cs, 0, 100},
        Expect{work, 100, 100}, Expect{ly + " / stmt main.c:12", 1, 1}, Expect{lz + " / stmt main.c:14", 5, 5}}) {
    ASSERT_TRUE(at.count(x.path)) << x.path;
    const auto node = at[x.path];
    EXPECT_EQ(summary(*db, node, E).sum(), 3 * x.e) << x.path;
    EXPECT_EQ(summary(*db, node, I).sum(), 3 * x.i) << x.path;
  }
  const auto s = summary(*db, at[main], I).finalize(2, metrics::Population::All);
  EXPECT_DOUBLE_EQ(s.mean, 166.5);
  EXPECT_DOUBLE_EQ(s.min, 111);
  EXPECT_DOUBLE_EQ(s.max, 222);
  EXPECT_EQ(s.argmin, 0u);
  EXPECT_EQ(s.argmax, 1u);
  EXPECT_DOUBLE_EQ(s.stddev, 55.5);
  EXPECT_DOUBLE_EQ(s.imbalance, 222 / 166.5);
  // The root's inclusive value is the run's total; per-thread values in both orders agree.
  EXPECT_EQ(summary(*db, 0, I).sum(), 333u);
  const auto byNode = db->nodeValues(at[main], 0, I);
  ASSERT_EQ(byNode.size(), 2u);
  EXPECT_EQ(byNode[0].profile, 0u);
  EXPECT_EQ(byNode[0].value, 111u);
  EXPECT_EQ(byNode[1].value, 222u);
  std::uint64_t fromProfile = 0;
  for (const auto& v : db->profileValues(1))
    if (v.node == at[main] && v.scope == I) fromProfile = v.value;
  EXPECT_EQ(fromProfile, 222u);
}

TEST_F(Prof, RecursionCountsEverySampleOnce) {
  auto meas = fromJson("rec", R"({"metrics": [{"name": "t"}], "threads": [{"id": {"rank": 0}, "samples": [
    {"path": [{"proc": "f"}, {"callsite": "f.c:3"}, {"proc": "g"}, {"callsite": "g.c:7"}, {"proc": "f"}, {"stmt": "f.c:2"}],
     "counts": {"t": 4}},
    {"path": [{"proc": "f"}, {"callsite": "f.c:3"}, {"proc": "g"}, {"stmt": "g.c:5"}], "counts": {"t": 2}},
    {"path": [{"proc": "f"}, {"stmt": "f.c:2"}], "counts": {"t": 1}}]}]})");
  auto db = prof(meas, "db");
  auto at = pathIndex(*db);
  EXPECT_EQ(summary(*db, at["f"], I).sum(), 7u);
  EXPECT_EQ(summary(*db, at["f"], E).sum(), 1u);
  EXPECT_EQ(summary(*db, at["f / call f.c:3 / g"], I).sum(), 6u);
  EXPECT_EQ(summary(*db, at["f / call f.c:3 / g"], E).sum(), 2u);
  EXPECT_EQ(summary(*db, at["f / call f.c:3 / g / call g.c:7 / f"], I).sum(), 4u);
  EXPECT_EQ(summary(*db, at["f / call f.c:3 / g / call g.c:7 / f"], E).sum(), 4u);
  EXPECT_EQ(summary(*db, 0, I).sum(), 7u);
}

TEST_F(Prof, NodePresentInOneThreadOfFour) {
  std::string threads;
  for (int r = 0; r < 4; ++r) {
    threads += std::string(r ? "," : "") + R"({"id": {"rank": )" + std::to_string(r) +
               R"(}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"t": 10}})";
    if (r == 2) threads += R"(, {"path": [{"proc": "main"}, {"stmt": "m.c:9"}], "counts": {"t": 8}})";
    threads += "]}";
  }
  auto db = prof(fromJson("one", R"({"metrics": [{"name": "t"}], "threads": [)" + threads + "]}"), "db");
  auto at = pathIndex(*db);
  const auto acc = summary(*db, at["main / stmt m.c:9"], E);
  const auto present = acc.finalize(4, metrics::Population::Present);
  EXPECT_EQ(present.count, 1u);
  EXPECT_DOUBLE_EQ(present.mean, 8);
  EXPECT_DOUBLE_EQ(present.stddev, 0);
  const auto all = acc.finalize(4, metrics::Population::All);
  EXPECT_DOUBLE_EQ(all.mean, 2);
  EXPECT_DOUBLE_EQ(all.min, 0);
  EXPECT_DOUBLE_EQ(all.stddev, std::sqrt(12.0));
  EXPECT_EQ(all.argmax, 2u);
}

TEST_F(Prof, StragglerRankIsTheArgmax) {
  std::string threads;
  for (int r = 0; r < 6; ++r) {
    const int wait = r == 4 ? 50 : 10;
    threads += std::string(r ? "," : "") + R"({"id": {"rank": )" + std::to_string(r) + R"(, "thread": 0},
      "samples": [{"path": [{"proc": "main"}, {"callsite": "m.c:5"}, {"proc": "MPI_Wait", "module": "libmpi.so"}, {"stmt": "w.c:1"}],
                   "counts": {"t": )" +
               std::to_string(wait) + "}}]}";
  }
  auto db = prof(fromJson("straggler", R"({"metrics": [{"name": "t", "period": 1000}], "threads": [)" + threads + "]}"),
                 "db", 2);
  auto at = pathIndex(*db);
  const auto s = summary(*db, at["main / call m.c:5 / MPI_Wait"], I).finalize(6, metrics::Population::All);
  EXPECT_DOUBLE_EQ(s.max, 50000);
  EXPECT_DOUBLE_EQ(s.min, 10000);
  EXPECT_EQ(s.argmax, 4u);
  EXPECT_EQ(s.argmin, 0u);
  EXPECT_DOUBLE_EQ(s.mean, 100000.0 / 6);
  EXPECT_EQ(db->metadata().profiles[4], (IdTuple{{IdKind::Rank, 4}, {IdKind::Thread, 0}}));
}

// Every column family, entry by entry.
using csp::test::dumpDatabase;

TEST_F(Prof, SameDatabaseForAnyProcessAndWorkerCount) {
  const auto meas = dir / "meas";
  ASSERT_EQ(
      run(tool("csp-gen") + " -q --ranks 64 --threads 4 --nodes 300 --groups 3 --regions --seed 3 -o " + meas.string())
          .status,
      0);
  // A per-thread derived metric too: its real-valued summaries must not depend on the split.
  const std::string derive = " --derive 'wait = `real-time` - `cpu-time`' --derive 'share = `cpu-time` / `real-time`'";
  // Unbound: -j 2 runs two worker threads where the machine has two CPUs.
  prof(meas, "np1", 1, "-j 2 --batch 16" + derive, "--bind-to none ");
  const auto reference = dumpDatabase(dir / "np1");
  ASSERT_GT(reference.size(), 1000u);
  // 256 profiles in batches of 16: several batches on every process.
  for (const auto& [ranks, extra, name] :
       {std::tuple{1, "-j 1 --batch 16", "np1j1"}, std::tuple{2, "-j 1 --batch 16", "np2"},
        std::tuple{4, "-j 1 --batch 16", "np4"}, std::tuple{2, "-j 2 --batch 16", "np2j2"}}) {
    prof(meas, name, ranks, extra + derive, "--bind-to none ");
    const auto other = dumpDatabase(dir / name);
    ASSERT_EQ(other.size(), reference.size()) << name;
    for (std::size_t i = 0; i < reference.size(); ++i) {
      ASSERT_EQ(other[i].first, reference[i].first) << name << " entry " << i;
      ASSERT_EQ(other[i].second, reference[i].second) << name << " key " << reference[i].first;
    }
  }
}

// More workers than the CPUs a process may run on (mpirun's or srun's binding; taskset here):
// it uses those CPUs and says so once, instead of oneTBB refusing the extra workers with a warning
// of its own on every rank. The database is the one of -j 1.
TEST_F(Prof, MoreJobsThanBoundCpusUseTheCpusAndSaySo) {
  const std::string shape = "--ranks 8 --threads 2 --nodes 200 --seed 5";
  // Within the CPUs: no note.
  const auto within = summaryOf(shape, "", "-j 1");
  ASSERT_EQ(within.status, 0) << within.output;
  EXPECT_EQ(within.output.find("note: -j"), std::string::npos) << within.output;
  const auto reference = dumpDatabase(dir / "db");
  ASSERT_GT(reference.size(), 100u);
  const std::string note = "note: -j 3 is more than the 1 CPU(s) rank 0 may run on (its CPU binding), so it used 1";
  for (const auto& launcher :
       {std::string("taskset -c 0 "), "taskset -c 0 " + csp::test::mpirun(2) + "--bind-to none "}) {
    const auto r = summaryOf(shape, launcher, "-j 3 --force");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(note), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("TBB Warning"), std::string::npos) << r.output;
    EXPECT_EQ(dumpDatabase(dir / "db"), reference) << launcher;
  }
}

// Large profiles get smaller batches by default (two batches of per-thread values are in memory
// at a time, and these take one to three times their input): as many as hold --batch-budget MiB
// of input (64 by default; 1 here, so that a small input makes several batches) by their mean
// size. Every process must use the batches rank 0 chose: with two processes, each holding whole
// batches, the database is the one a single process makes with that --batch.
TEST_F(Prof, LargeProfilesGetSmallerBatchesOnEveryProcess) {
  const auto meas = dir / "meas";
  ASSERT_EQ(run("timeout -k 5 120 " + tool("csp-gen") + " -q --ranks 24 --nodes 8000 --metrics 1 --seed 2 -o " +
                meas.string())
                .status,
            0);
  std::uint64_t bytes = 0, files = 0;
  for (const auto& e : std::filesystem::directory_iterator(meas)) bytes += e.file_size(), ++files;
  ASSERT_EQ(files, 24u);
  const std::uint64_t expected = (std::uint64_t{1} << 20) / (bytes / files);
  ASSERT_GT(expected, 1u) << "profiles of " << bytes / files << " bytes";
  ASSERT_LT(expected, 12u) << "profiles of " << bytes / files << " bytes: fewer than three batches";
  const auto r = run("timeout -k 5 120 " + csp::test::mpirun(2) + tool("csp-prof-mpi") + " -j 1 --batch-budget 1 " +
                     meas.string() + " -o " + (dir / "auto").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("batches of {} profiles", expected)), std::string::npos) << r.output;
  prof(meas, "explicit", 1, fmt::format("-j 2 --batch {}", expected));
  const auto reference = dumpDatabase(dir / "explicit");
  EXPECT_EQ(dumpDatabase(dir / "auto"), reference);
  // One batch of all 24 makes other node blocks: the same values, in fewer keys.
  prof(meas, "whole", 1, "-j 2 --batch 24");
  EXPECT_LT(dumpDatabase(dir / "whole").size(), reference.size());
  // The default budget holds all of them in one batch.
  const auto d = run(tool("csp-prof-mpi") + " -j 1 " + meas.string() + " -o " + (dir / "default").string());
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("batches of 256 profiles"), std::string::npos) << d.output;
  EXPECT_EQ(dumpDatabase(dir / "default"), dumpDatabase(dir / "whole"));
  // A budget of no MiB is refused.
  EXPECT_EQ(run(tool("csp-prof-mpi") + " --batch-budget 0 " + meas.string() + " -o " + (dir / "none").string()).status,
            2);
}

// A batch of more profiles than a node block holds (1,024 values): the by-node writer seals full
// blocks in the middle of a node, and the summaries take each block then
// (SummaryTable::addBlock). The summaries and distributions of count metrics are exact whatever
// the batches: the same as with batches of 64 on two processes, with one thread class (the
// summaries' block loops) and with a main thread and workers per process (value by value into
// each class).
TEST_F(Prof, SummariesOfBatchesBeyondOneNodeBlock) {
  for (const int threads : {1, 3}) {
    const auto meas = dir / fmt::format("meas{}", threads);
    ASSERT_EQ(
        run(tool("csp-gen") +
            fmt::format(" -q --ranks {} --threads {} --nodes 40 --metrics 2 --seed 4 -o ", 1200 / threads, threads) +
            meas.string())
            .status,
        0);
    const auto whole = fmt::format("whole{}", threads), small = fmt::format("small{}", threads);
    prof(meas, whole, 1, "-j 2 --batch 1200");
    prof(meas, small, 2, "-j 1 --batch 64");
    auto summaries = [&](const std::string& name) {
      std::vector<std::pair<std::string, std::string>> out;
      for (auto& e : dumpDatabase(dir / name))
        if (e.first.starts_with("summaries:") || e.first.starts_with("distributions:")) out.push_back(std::move(e));
      return out;
    };
    const auto reference = summaries(small);
    ASSERT_GT(reference.size(), 100u);
    EXPECT_EQ(summaries(whole), reference) << threads << " thread(s) per process";
  }
}

// The items "name 1.23s" or "name 1.23s (rank 2)", separated by commas, of a summary line after
// its colon.
struct PhaseItem {
  std::string name;
  double seconds = 0;
  int rank = -1;  // -1: none given
};
std::vector<PhaseItem> phaseItems(const std::string& text) {
  std::vector<PhaseItem> items;
  std::size_t at = text.find(':') + 1;
  while (at < text.size()) {
    const auto end = std::min(text.find(',', at), text.size());
    std::string item = text.substr(at, end - at);
    PhaseItem out;
    if (const auto open = item.find(" (rank "); open != std::string::npos) {
      out.rank = std::stoi(item.substr(open + 7));
      item.erase(open);
    }
    const auto space = item.rfind(' ');
    out.name = item.substr(0, space);
    out.name.erase(0, out.name.find_first_not_of(' '));
    out.seconds = std::stod(item.substr(space + 1));
    items.push_back(out);
    at = end + 1;
  }
  return items;
}

// The summary's time line breaks the run down by kind of work (issue 28): reading + validating,
// attributing + merging, encoding and storing each order, accumulating. Busy seconds are
// measured inside their phase, so on w workers they cannot exceed w times its wall seconds,
// however loaded the machine. (Nothing asserts that one is above zero: printed to 0.01 s, this
// small run's reading rounds to 0.00 on a fast machine.)
TEST_F(Prof, SummaryBreaksTheTimeDownByKindOfWork) {
  const auto r = summaryOf("--ranks 32 --threads 4 --nodes 300 --seed 5", "", "-j 2 --batch 16");
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(r.output.find("slowest rank"), std::string::npos) << "one process has no slowest rank:\n" << r.output;
  const auto line = r.output.find("  time ");
  ASSERT_NE(line, std::string::npos) << r.output;
  const std::string text = r.output.substr(line, r.output.find('\n', line) - line);
  std::map<std::string, double> phase;
  for (const auto& item : phaseItems(text)) phase[item.name] = item.seconds;
  for (const char* name :
       {"read + attribute", "busy reading + validating", "busy attributing + merging", "metrics",
        "of which: write + accumulate", "busy encoding values by profile", "busy storing values by profile",
        "busy encoding values by node + accumulating summaries", "busy storing values by node",
        "busy accumulating region summaries", "merge values by node"}) {
    ASSERT_TRUE(phase.count(name)) << name << " missing in: " << text;
    EXPECT_GE(phase[name], 0.0) << name;
  }
  constexpr double kWorkers = 2, kRounding = 0.02;  // printed to 0.01 s
  EXPECT_LE(phase["busy reading + validating"] + phase["busy attributing + merging"],
            kWorkers * phase["read + attribute"] + kRounding)
      << text;
  // Each writer runs one batch at a time, inside the batches' writing.
  const double writing = phase["of which: write + accumulate"] + kRounding;
  EXPECT_LE(phase["busy encoding values by profile"] + phase["busy storing values by profile"], writing) << text;
  EXPECT_LE(phase["busy encoding values by node + accumulating summaries"] + phase["busy storing values by node"],
            writing)
      << text;
  EXPECT_LE(phase["busy accumulating region summaries"], writing) << text;
}

// With several processes the summary also names, per phase up to publication, the rank that took
// longest and its time: the job waits for it. The same phases in the same order as rank 0's time
// line, up to "combine + metadata"; each time at least rank 0's; every rank one of the job's.
TEST_F(Prof, SummaryNamesTheSlowestRankOfEachPhase) {
  const auto r = summaryOf("--ranks 12 --threads 2 --nodes 200 --seed 9", csp::test::mpirun(3), "-j 1 --batch 4");
  ASSERT_EQ(r.status, 0) << r.output;
  auto lineOf = [&](const std::string& start) {
    const auto at = r.output.find(start);
    return at == std::string::npos ? std::string() : r.output.substr(at, r.output.find('\n', at) - at);
  };
  const auto own = phaseItems(lineOf("  time "));
  const std::string slowestLine = lineOf("  slowest rank per phase:");
  ASSERT_FALSE(slowestLine.empty()) << r.output;
  const auto slowest = phaseItems(slowestLine);
  ASSERT_GT(slowest.size(), 5u) << slowestLine;
  ASSERT_LT(slowest.size(), own.size()) << slowestLine;
  EXPECT_EQ(slowest.back().name, "combine + metadata") << slowestLine;
  EXPECT_EQ(own[slowest.size()].name, "ingest + publish");
  for (std::size_t i = 0; i < slowest.size(); ++i) {
    EXPECT_EQ(slowest[i].name, own[i].name);
    EXPECT_GE(slowest[i].rank, 0) << slowest[i].name;
    EXPECT_LT(slowest[i].rank, 3) << slowest[i].name;
    EXPECT_GE(slowest[i].seconds, own[i].seconds) << slowest[i].name;
  }
}

// Identities are kept per profile as the thread's own parts plus an index into the parts the
// run's threads share (executable, command line, settings): the metadata must come out as if each
// profile had kept its own, for any process count. Two executables interleaved by rank, their
// own command lines, and a dropped-sample count that differs by thread (so that some shared
// parts are shared and some are not).
TEST_F(Prof, MetadataOfInterleavedExecutablesForAnyProcessCount) {
  const auto meas = dir / "exes";
  std::filesystem::create_directories(meas);
  for (std::uint32_t rank = 0; rank < 4; ++rank) {
    for (std::uint32_t thread = 0; thread < 2; ++thread) {
      const bool helper = rank == 1;
      storage::ProfileBuilder b(FrameKind::Symbolic);
      auto& p = b.profile();
      p.identity.idTuple = {{IdKind::Rank, rank}, {IdKind::Thread, thread}};
      p.identity.pid = 100 + rank;
      p.identity.hostname = rank < 2 ? "nid001" : "nid002";
      p.identity.executable = helper ? "/usr/bin/helper" : "/opt/app/bin/solver";
      p.identity.commandLine =
          helper ? std::vector<std::string>{"helper", "--quiet"} : std::vector<std::string>{"solver", "-n", "64"};
      p.identity.settings = {{"mpi-ranks", "4"}, {"events", "cpu-time@200"}};
      if (thread == 1) p.identity.settings.push_back({"dropped-signal-busy", std::to_string(rank + 1)});
      b.addMetric({"cpu-time", "ns", MetricKind::Sampled, 1'000'000, "thread CPU time"});
      const auto main = b.frame(SymbolicFrame{ScopeKind::ProcFrame, b.intern("main"), b.intern("main.c"), 1,
                                              b.intern(helper ? "helper" : "solver")});
      const auto stmt = b.frame(SymbolicFrame{ScopeKind::Stmt, 0, b.intern("main.c"), 2, 0});
      std::uint32_t path[] = {main, stmt};
      b.addCount(b.path(path), 0, 1 + rank);
      storage::writeProfile(b.finish(), meas / fmt::format("r{:03}-t{}.cspprof", rank, thread));
    }
  }
  auto db = prof(meas, "np1", 1, "-j 2");
  ASSERT_TRUE(db);
  const auto& m = db->metadata();
  EXPECT_EQ(m.executable, "/opt/app/bin/solver");  // the one most threads ran
  EXPECT_EQ(m.commandLine, (std::vector<std::string>{"solver", "-n", "64"}));
  EXPECT_EQ(m.hostnames, (std::vector<std::string>{"nid001", "nid002"}));
  EXPECT_EQ(m.processCount, 4u);
  std::map<std::string, std::string> property;
  for (const auto& st : m.properties) property[st.key] = st.value;
  EXPECT_EQ(property["executables"], "/opt/app/bin/solver (6 threads), /usr/bin/helper (2 threads)");
  EXPECT_EQ(property["dropped-samples-by-cause"], "signal-busy 10 (100.0 %)");  // 1 + 2 + 3 + 4
  const auto reference = dumpDatabase(dir / "np1");
  for (const auto& [ranks, name] : {std::pair{2, "np2"}, std::pair{3, "np3"}}) {
    prof(meas, name, ranks, "-j 1");
    EXPECT_EQ(dumpDatabase(dir / name), reference) << name;
  }
}

TEST_F(Prof, PerThreadDerivedMetric) {
  // Two threads: cpu 6/real 8 and cpu 2/real 8 at the same statement; the derived share is
  // computed per thread (0.75 and 0.25), then aggregated: its mean is 0.5 — not the ratio of
  // sums (8/16 happens to agree) and not 6+2 over anything.
  auto meas = fromJson("derive", R"({"metrics": [{"name": "cpu"}, {"name": "real"}], "threads": [
    {"id": {"rank": 0}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"cpu": 6, "real": 8}}]},
    {"id": {"rank": 1}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"cpu": 1, "real": 4}},
                                     {"path": [{"proc": "main"}, {"stmt": "m.c:2"}], "counts": {"cpu": 1, "real": 4}}]}]})");
  auto db = prof(meas, "db", 2, "--derive 'share = cpu / real' --derive 'idle = real - cpu'");
  ASSERT_EQ(db->metrics().size(), 4u);
  EXPECT_EQ(db->metrics()[2].descriptor.name, "share");
  EXPECT_EQ(db->metrics()[2].valueType, storage::ValueType::Real);
  auto at = pathIndex(*db);
  auto real = [&](storage::NodeId node, storage::MetricId metric, storage::MetricScope scope) {
    for (const auto& a : db->summaries(node))
      if (a.metric == metric && a.scope == scope) return metrics::decodeRealAccumulator(a.bytes);
    return metrics::RealAccumulator{};
  };
  const auto share = real(at["main"], 2, I).finalize(2, metrics::Population::All);
  EXPECT_DOUBLE_EQ(share.mean, 0.5);  // thread 0: 6/8, thread 1: 2/8
  EXPECT_DOUBLE_EQ(share.max, 0.75);
  EXPECT_EQ(share.argmax, 0u);
  const auto idle = real(at["main / stmt m.c:1"], 3, E).finalize(2, metrics::Population::All);
  EXPECT_DOUBLE_EQ(idle.sum, 2 + 3);
  // A bad expression is refused before any work, naming the option.
  auto r = run(tool("csp-prof-mpi") + " -q --derive 'x = cpu +' " + meas.string() + " -o " + (dir / "bad").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--derive 'x = cpu +'"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad"));
}

TEST_F(Prof, RegionConcurrencyFromTheEventLogs) {
  // One process, 8 threads in region "work": seven for 100 ns, the straggler for 200 ns (the
  // microbenchmark of Benavides Ch. 4: straggler degree 1/2). A second process runs "work" on
  // one thread only. Threads of the first process straddle the two ranks' ranges.
  std::string threads;
  for (int t = 0; t < 8; ++t) {
    const int end = t == 7 ? 200 : 100;
    threads += std::string(t ? "," : "") + R"({"id": {"rank": 0, "thread": )" + std::to_string(t) +
               R"(}, "pid": 11, "hostname": "n1", "events": [{"t": 1000, "enter": "work"}, {"t": )" +
               std::to_string(1000 + end) + R"(, "exit": "work"}]})";
  }
  threads += R"(, {"id": {"rank": 1, "thread": 0}, "pid": 12, "hostname": "n1",
                   "events": [{"t": 5, "enter": "work"}, {"t": 55, "exit": "work"}]})";
  auto db =
      prof(fromJson("conc", R"({"metrics": [{"name": "t"}], "threads": [)" + threads + "]}"), "db", 2, "--batch 4");
  storage::RegionId work = 0;
  for (storage::RegionId r = 1; r < db->metadata().regionCount; ++r)
    if (db->metadata().strings[db->region(r)->name] == "work") work = r;
  ASSERT_NE(work, 0u);
  std::map<storage::MetricId, metrics::IntAccumulator> acc;
  for (const auto& a : db->regionSummaries(work))
    if (a.scope == E) acc[a.metric] = metrics::decodeIntAccumulator(a.bytes);
  ASSERT_EQ(acc.count(2), 1u);
  // Per process: any-time, all-time, area, straggler time, max parallelism.
  EXPECT_EQ(acc[2].sum(), 200u + 50u);
  EXPECT_EQ(acc[3].sum(), 100u + 50u);  // the single-thread process is "all threads" all along
  EXPECT_EQ(acc[4].sum(), 7u * 100 + 200 + 50);
  EXPECT_EQ(acc[5].sum(), 100u);  // no straggling in a process of one thread
  EXPECT_EQ(acc[6].max(), 8u);
  EXPECT_EQ(acc[6].min(), 1u);
  EXPECT_EQ(acc[2].count(), 2u);   // one value per process
  EXPECT_EQ(acc[2].argmax(), 0u);  // the first process, by its first profile
  // Straggler degree of the 8-thread process: 100 / 200.
  EXPECT_DOUBLE_EQ(static_cast<double>(acc[5].max()) / static_cast<double>(acc[2].max()), 0.5);
  EXPECT_EQ(summaryOfVisits(*db, work), 9u);

  // The database describes its region metrics, so the Regions view can show and sort by any.
  const auto& described = db->metadata().regionMetrics;
  ASSERT_EQ(described.size(), 7u);
  EXPECT_EQ(described[5].name, "straggler-time");
  EXPECT_EQ(described[5].unit, "ns");
  EXPECT_TRUE(described[5].perProcess);
  EXPECT_FALSE(described[5].inclusive);
  EXPECT_TRUE(described[1].inclusive);  // time
  const auto view = run(tool("csp-views") + " --regions --sort straggler-time -m straggler-time -s max --scope E " +
                        (dir / "db").string());
  ASSERT_EQ(view.status, 0) << view.output;
  EXPECT_NE(view.output.find("straggler-time (E)"), std::string::npos) << view.output;
  EXPECT_NE(view.output.find("100"), std::string::npos) << view.output;
}

TEST_F(Prof, RegionAreaBeyond64BitsIsRefusedNotWrapped) {
  // Three threads of one process in region "r" for 9e18 ns each: the process's area (thread-ns)
  // is 2.7e19, beyond 2^64 - 1; it used to wrap to 8.55e18. Each thread's own values fit.
  std::string threads;
  for (int t = 0; t < 3; ++t)
    threads +=
        std::string(t ? "," : "") + R"({"id": {"rank": 0, "thread": )" + std::to_string(t) +
        R"(}, "pid": 7, "hostname": "n1", "events": [{"t": 0, "enter": "r"}, {"t": 9000000000000000000, "exit": "r"}]})";
  const auto meas = fromJson("area", R"({"metrics": [{"name": "t"}], "threads": [)" + threads + "]}");
  const std::filesystem::path first = storage::listProfiles(meas).front();
  for (int ranks : {1, 2}) {
    const auto db = dir / ("area-db" + std::to_string(ranks));
    const auto r = run(csp::test::mpirun(ranks) + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find(first.string() +
                            ": region 'r': the area of process n1 pid 7 (3 threads) exceeds 2^64 - 1 thread-ns"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(std::filesystem::exists(db));
  }
}

TEST_F(Prof, MixedInputsAreRefusedNamingBothFiles) {
  const auto a = dir / "a";
  const auto b = dir / "b";
  ASSERT_EQ(run(tool("csp-gen") + " -q --ranks 2 --nodes 50 --seed 1 -o " + a.string()).status, 0);
  ASSERT_EQ(run(tool("csp-gen") + " -q --ranks 2 --nodes 50 --seed 2 -o " + b.string()).status, 0);
  const std::filesystem::path first = storage::listProfiles(a).front(), firstOfB = storage::listProfiles(b).front();
  auto prof = [&](const std::string& inputs) {
    return run(csp::test::mpirun(2) + tool("csp-prof-mpi") + " -q " + inputs + " -o " + (dir / "mixed").string());
  };
  // The same directory twice: every profile would count twice.
  auto r = prof(a.string() + " " + a.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(first.string() + " and " + first.string() + " are the same profile"), std::string::npos)
      << r.output;
  // A profile beside its own directory, reached through another spelling.
  r = prof(a.string() + " " + (a / ".." / "a" / first.filename()).string());
  EXPECT_NE(r.output.find("are the same profile: an input is given twice"), std::string::npos) << r.output;
  // Two runs: the same threads twice.
  r = prof(a.string() + " " + b.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(
      r.output.find(first.string() + " and " + firstOfB.string() + " are the same thread (node 0 rank 0 thread 0)"),
      std::string::npos)
      << r.output;
  // One metric name, two meanings.
  const auto sampled =
      fromJson("sampled", R"({"metrics": [{"name": "cpu-time", "unit": "ns", "kind": "sampled", "period": 1000}],
    "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"cpu-time": 5000}}]}]})");
  const auto counted = fromJson("counted", R"({"metrics": [{"name": "cpu-time", "unit": "cycles", "kind": "counted"}],
    "threads": [{"id": {"rank": 1}, "samples": [{"path": [{"proc": "main"}, {"stmt": "m.c:1"}], "counts": {"cpu-time": 5}}]}]})");
  r = prof(sampled.string() + " " + counted.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(
      r.output.find("metric 'cpu-time' means different things in " + storage::listProfiles(sampled).front() +
                    " (sampled, unit ns) and " + storage::listProfiles(counted).front() + " (counted, unit cycles)"),
      std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "mixed"));
}

TEST_F(Prof, EntriesNamedLikeProfilesThatAreNoFilesAreReportedOrSkipped) {
  const auto meas = dir / "odd";
  ASSERT_EQ(run(tool("csp-gen") + " -q --ranks 3 --nodes 50 -o " + meas.string()).status, 0);
  ASSERT_EQ(::mkfifo((meas / "fifo.cspprof").c_str(), 0644), 0);
  std::filesystem::create_directory(meas / "dir.cspprof");
  std::filesystem::create_symlink(meas / "nowhere", meas / "dangling.cspprof");
  std::filesystem::create_symlink("/dev/zero", meas / "zero.cspprof");
  std::filesystem::create_symlink(meas / "loop-b.cspprof", meas / "loop-a.cspprof");
  std::filesystem::create_symlink(meas / "loop-a.cspprof", meas / "loop-b.cspprof");
  const std::map<std::string, std::string> expected = {
      {"fifo.cspprof", "a FIFO, not a profile"},        {"dir.cspprof", "a directory, not a profile"},
      {"dangling.cspprof", "a dangling symbolic link"}, {"zero.cspprof", "a character device, not a profile"},
      {"loop-a.cspprof", "a symbolic link loop"},       {"loop-b.cspprof", "a symbolic link loop"}};
  const auto db = dir / "odd-db";
  auto r =
      run("timeout 60 " + csp::test::mpirun(2) + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string());
  EXPECT_EQ(r.status, 1) << r.output;
  // Each named with its defect (a process shows its first five errors and counts the rest).
  std::size_t named = 0;
  for (const auto& [name, defect] : expected)
    named += r.output.find((meas / name).string() + ": " + defect) != std::string::npos;
  EXPECT_GE(named, 5u) << r.output;
  EXPECT_EQ(named == expected.size(), r.output.find("more errors") == std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(db));
  r = run("timeout 60 " + csp::test::mpirun(2) + tool("csp-prof-mpi") + " --skip-invalid " + meas.string() + " -o " +
          db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto opened = storage::Database::open(db);
  EXPECT_EQ(opened->metadata().profiles.size(), 3u);
  std::map<std::string, std::string> skipped;
  for (const auto& k : opened->metadata().skipped)
    skipped[std::filesystem::path(k.path).filename().string()] = k.reason;
  ASSERT_EQ(skipped.size(), expected.size());
  for (const auto& [name, defect] : expected)
    EXPECT_NE(skipped[name].find(defect), std::string::npos) << name << ": " << skipped[name];
}

TEST_F(Prof, CorruptProfileStopsTheRunNamingTheFile) {
  const auto meas = dir / "meas";
  ASSERT_EQ(run(tool("csp-gen") + " -q --ranks 6 --nodes 100 -o " + meas.string()).status, 0);
  const auto victim = meas / "n0000-r000003-t0000.100003.cspprof";
  ASSERT_TRUE(std::filesystem::exists(victim));
  std::filesystem::resize_file(victim, std::filesystem::file_size(victim) / 2);
  const auto db = dir / "db";
  auto r = run(csp::test::mpirun(2) + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("csp-prof-mpi: error: " + victim.string() + ": truncated"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(db));
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".db.tmp"), std::string::npos) << e.path();

  r = run(csp::test::mpirun(2) + tool("csp-prof-mpi") + " --skip-invalid " + meas.string() + " -o " + db.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("skipped " + victim.string() + ": truncated"), std::string::npos) << r.output;
  auto opened = storage::Database::open(db);
  EXPECT_EQ(opened->metadata().profiles.size(), 5u);
  ASSERT_EQ(opened->metadata().skipped.size(), 1u);
  EXPECT_EQ(opened->metadata().skipped[0].path, victim.string());
  EXPECT_NE(opened->metadata().skipped[0].reason.find("truncated"), std::string::npos);
}

TEST_F(Prof, BadArgumentsAndExistingOutput) {
  auto r = run(tool("csp-prof-mpi") + " " + (dir / "nothing").string() + " -o " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find((dir / "nothing").string() + ": no such file or directory"), std::string::npos) << r.output;
  EXPECT_NE(run(tool("csp-prof-mpi") + " " + dir.path().string()).status, 0);  // no -o
  const auto meas = dir / "meas";
  ASSERT_EQ(run(tool("csp-gen") + " -q --ranks 2 --nodes 50 -o " + meas.string()).status, 0);
  ASSERT_EQ(run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + (dir / "db").string()).status, 0);
  r = run(tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + (dir / "db").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
  EXPECT_EQ(run(tool("csp-prof-mpi") + " -q --force " + meas.string() + " -o " + (dir / "db").string()).status, 0);
}

}  // namespace
