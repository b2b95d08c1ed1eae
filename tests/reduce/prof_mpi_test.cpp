// csp-prof-mpi never hangs: every process count against every input shape (each run under a
// timeout, every database identical to the one-process database), and failure injection in every
// phase on every rank (the whole job ends within seconds, with the failing rank's message, no
// database and no temporary directory).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/cpu_hogs.hpp"
#include "common/db_dump.hpp"
#include "common/test_support.hpp"
#include "csp/reduce/mpi_comm.hpp"
#include "csp/storage/profile_io.hpp"

using namespace csp;
using csp::test::CpuHogs;
using csp::test::run;
using csp::test::TempDir;
using csp::test::tool;
namespace fs = std::filesystem;

namespace {

// A measurement directory of `n` profiles of very uneven size: profile 0 has thousands of
// contexts, the others a handful each (1 to 13 samples). Two threads per process, processes
// spread over hosts; every third thread logs region events, so processes straddle ranks.
fs::path unevenInput(const TempDir& dir, std::size_t n) {
  std::ostringstream json;
  json << R"({"metrics": [{"name": "cpu-time", "unit": "ns", "kind": "sampled", "period": 1000},
                          {"name": "real-time", "unit": "ns", "kind": "sampled", "period": 1000}],
              "threads": [)";
  for (std::size_t i = 0; i < n; ++i) {
    json << (i ? ",\n" : "\n") << R"({"id": {"rank": )" << i / 2 << R"(, "thread": )" << i % 2 << R"(}, "hostname": "h)"
         << i / 8 << R"(", "pid": )" << 1000 + i / 2 << R"(, "samples": [)";
    const std::size_t samples = i == 0 ? 3000 : (i * 7) % 13 + 1;
    for (std::size_t k = 0; k < samples; ++k) {
      const std::size_t f = i == 0 ? k % 50 : (i + k) % 9;
      const std::size_t line = i == 0 ? k : (i * 3 + k) % 40;
      json << (k ? "," : "") << R"({"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:)"
           << 10 + f << R"("}, {"proc": "f)" << f << R"(", "file": "f.c", "line": 1}, {"stmt": "f.c:)" << line + 2
           << R"("}], "counts": {"cpu-time": )" << ((i * 31 + k * 7) % 100 + 1) * 1000 << R"(, "real-time": )"
           << ((i * 17 + k * 5) % 90 + 11) * 1000 << "}}";
    }
    json << "]";
    if (i % 3 == 0) {
      const std::size_t t = i * 10;
      json << R"(, "events": [{"t": )" << t << R"(, "enter": "solve"}, {"t": )" << t + 5
           << R"(, "enter": "solve/step"}, {"t": )" << t + 20 + i % 7 << R"(, "exit": "solve/step"}, {"t": )"
           << t + 50 + i % 11 << R"(, "exit": "solve"}])";
    }
    json << "}";
  }
  json << "]}";
  const auto spec = dir / ("uneven-" + std::to_string(n) + ".json");
  std::ofstream(spec) << json.str();
  const auto meas = dir / ("meas-" + std::to_string(n));
  const auto r = run(tool("csp-gen") + " -q --from-json " + spec.string() + " -o " + meas.string());
  EXPECT_EQ(r.status, 0) << r.output;
  return meas;
}

// mpirun under a hard time limit: a hang shows as status 124.
std::string limited(int seconds, int ranks) {
  return "timeout -k 5 " + std::to_string(seconds) + " " + csp::test::mpirun(ranks);
}

bool hasTemporary(const fs::path& parent) {
  for (const auto& e : fs::directory_iterator(parent))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

std::string views(const fs::path& db, const std::string& options) {
  const auto r = run(tool("csp-views") + " " + options + " " + db.string());
  EXPECT_EQ(r.status, 0) << r.output;
  // The database's name and its size on disk (how RocksDB laid out the same keys in files) are
  // the only things allowed to differ.
  const auto named = std::regex_replace(r.output, std::regex(db.filename().string()), "DB");
  return std::regex_replace(named, std::regex(R"(, [0-9.]+[KMG]?i?B on disk)"), "");
}

// One input shape against process counts: every database byte for byte the one-process one (the
// views are functions of the database; they are compared once, at the largest count). Shapes:
// uneven sizes (64: one big profile, 63 small) at every count from 1 to 8; fewer profiles than
// processes (1, 2, 3, 7) at counts just above and far above their number of profiles; many
// batches per process (1,000) at 1, 3 and 8 processes. (Each count is an mpirun: about 2 s.)
struct MatrixCase {
  std::size_t profiles;
  std::vector<int> ranks;
};

void PrintTo(const MatrixCase& c, std::ostream* out) {
  *out << c.profiles << " profiles at";
  for (int r : c.ranks) *out << " " << r;
}

class ProfMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(ProfMatrix, EveryProcessCountGivesTheOneProcessDatabase) {
  const std::size_t profiles = GetParam().profiles;
  TempDir dir("prof-matrix-" + std::to_string(profiles));
  const auto meas = unevenInput(dir, profiles);
  // --batch 2: several batches even for few profiles, so that some ranks get work and others none.
  auto prof = [&](int ranks) {
    const auto db = dir / ("np" + std::to_string(ranks));
    const auto r =
        run(limited(120, ranks) + tool("csp-prof-mpi") + " -q -j 1 --batch 2 " + meas.string() + " -o " + db.string());
    EXPECT_NE(r.status, 124) << "csp-prof-mpi hung at -np " << ranks << " with " << profiles << " profiles";
    EXPECT_EQ(r.status, 0) << "-np " << ranks << ": " << r.output;
    return db;
  };
  const auto reference = prof(1);
  const auto referenceDump = csp::test::dumpDatabase(reference);
  ASSERT_GT(referenceDump.size(), profiles);
  for (const int ranks : GetParam().ranks) {
    if (ranks == 1) continue;
    const auto db = prof(ranks);
    ASSERT_TRUE(fs::exists(db)) << "-np " << ranks;
    EXPECT_FALSE(hasTemporary(dir.path())) << "-np " << ranks;
    const auto other = csp::test::dumpDatabase(db);
    ASSERT_EQ(other.size(), referenceDump.size()) << "-np " << ranks;
    for (std::size_t i = 0; i < other.size(); ++i) {
      ASSERT_EQ(other[i].first, referenceDump[i].first) << "-np " << ranks << " entry " << i;
      ASSERT_EQ(other[i].second, referenceDump[i].second) << "-np " << ranks << " key " << other[i].first;
    }
    if (ranks == GetParam().ranks.back()) {
      for (const std::string o : {"", "--flat", "--callers", "--regions", "--info"})
        EXPECT_EQ(views(db, o), views(reference, o)) << "-np " << ranks << " view '" << o << "'";
    }
    fs::remove_all(db);
  }
}

const std::vector<int> kEveryCount{1, 2, 3, 4, 5, 6, 7, 8};
INSTANTIATE_TEST_SUITE_P(Profiles, ProfMatrix,
                         ::testing::Values(MatrixCase{1, {1, 2, 8}}, MatrixCase{2, {1, 3, 8}},
                                           MatrixCase{3, {1, 2, 4, 8}}, MatrixCase{7, {1, 3, 8}},
                                           MatrixCase{64, kEveryCount}, MatrixCase{1000, {1, 3, 8}}),
                         [](const auto& info) { return std::to_string(info.param.profiles) + "profiles"; });

// Without a launcher csp-prof-mpi does not start MPI (an Open MPI singleton spawns a runtime
// daemon, and outside a job some MPIs cannot start at all): an MPI that cannot initialize (a
// transport that does not exist) does not stop it, while CSP_MPI=always does start MPI and fails
// on it. The database is the one of mpirun -np 1.
TEST(ProfLauncher, WithoutALauncherNoMpiIsStartedAndTheDatabaseIsTheSame) {
  TempDir dir("prof-no-launcher");
  const auto meas = unevenInput(dir, 7);
  const std::string noLauncher =
      "env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK -u PMI_SIZE -u PMI_FD -u MV2_COMM_WORLD_RANK "
      "-u ALPS_APP_PE -u SLURM_STEP_ID OMPI_MCA_pml=csp-no-such-transport ";
  const auto solo = dir / "solo";
  auto r =
      run(noLauncher + "timeout -k 5 60 " + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + solo.string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(noLauncher + "CSP_MPI=always timeout -k 5 60 " + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " +
          (dir / "singleton").string());
  EXPECT_NE(r.status, 0) << "MPI was not started with CSP_MPI=always: " << r.output;
  EXPECT_NE(r.status, 124) << r.output;
  EXPECT_FALSE(fs::exists(dir / "singleton"));
  r = run("CSP_MPI=sometimes timeout -k 5 60 " + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " +
          (dir / "bad").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("CSP_MPI='sometimes'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "bad"));
  const auto launched = dir / "launched";
  r = run(limited(60, 1) + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + launched.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(csp::test::dumpDatabase(solo), csp::test::dumpDatabase(launched));
}

// csp-prof-mpi leaves Open MPI's cm PML out where it cannot be selected (no device of a network
// it drives, no PML chosen by the user or the site): MPI_Init then does not load the PSM and PSM2
// libraries, whose constructors sleep about 100 ms each. CSP_MPI_TRANSPORT=keep leaves Open MPI's
// own choice alone. The databases are the same.
TEST(ProfLauncher, CmIsLeftOutOnlyWhereItCannotBeSelected) {
  TempDir dir("prof-transport");
  const auto meas = unevenInput(dir, 5);
  const bool leftOut = !reduce::pmlLeavingOutCm(reduce::transportFacts()).empty();
  auto cmLoaded = [&](const std::string& env, const fs::path& db) {
    const auto r = run(env + " OMPI_MCA_pml_base_verbose=10 " + limited(60, 2) + tool("csp-prof-mpi") + " -q -j 1 " +
                       meas.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("opening pml components"), std::string::npos) << "no PML verbosity: " << r.output;
    return r.output.find("found loaded component cm") != std::string::npos;
  };
  const bool byDefault = cmLoaded("", dir / "default");
  const bool kept = cmLoaded("CSP_MPI_TRANSPORT=keep", dir / "keep");
  if (leftOut) {
    EXPECT_FALSE(byDefault);
    EXPECT_TRUE(kept) << "Open MPI's default selection does not load cm here: the test shows nothing";
  } else {
    EXPECT_EQ(byDefault, kept);
  }
  EXPECT_EQ(csp::test::dumpDatabase(dir / "default"), csp::test::dumpDatabase(dir / "keep"));
}

// Bundles (csp-run appends the profiles of threads that end while their process runs to one
// file per process): the same profiles, as bundles beside single files, give the same views,
// and the same database for any process count; a bundle given twice is refused.
TEST(ProfBundles, BundledProfilesGiveTheSameViewsForAnyProcessCount) {
  TempDir dir("prof-bundles");
  const auto files = unevenInput(dir, 64);
  const auto bundled = dir / "bundled";
  fs::create_directories(bundled);
  std::map<std::uint32_t, std::unique_ptr<storage::ProfileBundleWriter>> bundles;
  for (const auto& entry : storage::listProfiles(files)) {
    const ThreadProfile p = storage::readProfile(entry);
    const bool first = std::any_of(p.identity.idTuple.begin(), p.identity.idTuple.end(),
                                   [](const IdElement& e) { return e.kind == IdKind::Thread && e.value == 0; });
    if (first) {  // thread 0 of a process: a file of its own, as at exit
      storage::writeProfile(p, bundled / storage::profileFileName(p.identity));
      continue;
    }
    auto& b = bundles[p.identity.pid];
    if (!b) b = std::make_unique<storage::ProfileBundleWriter>(bundled / storage::bundleFileName(p.identity));
    b->append(p);
  }
  bundles.clear();
  std::size_t bundleFiles = 0;
  for (const auto& e : fs::directory_iterator(bundled)) bundleFiles += e.path().extension() == ".cspbundle";
  ASSERT_EQ(bundleFiles, 32u);
  ASSERT_EQ(storage::listProfiles(bundled).size(), 64u);

  auto prof = [&](const fs::path& input, int ranks, const std::string& name) {
    const auto db = dir / name;
    const auto r =
        run(limited(120, ranks) + tool("csp-prof-mpi") + " -q -j 1 --batch 2 " + input.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << name << ": " << r.output;
    return db;
  };
  const auto fromFiles = prof(files, 1, "single-files");
  const auto one = prof(bundled, 1, "bundled-np1");
  for (const std::string o : {"", "--flat", "--callers", "--regions"})
    EXPECT_EQ(views(one, o), views(fromFiles, o)) << "view '" << o << "'";
  const auto oneDump = csp::test::dumpDatabase(one);
  for (int ranks : {2, 3, 5}) {
    const auto db = prof(bundled, ranks, "bundled-np" + std::to_string(ranks));
    EXPECT_TRUE(csp::test::dumpDatabase(db) == oneDump) << "-np " << ranks;
  }
  const auto twice = run(limited(60, 1) + tool("csp-prof-mpi") + " -q " + bundled.string() + " " + bundled.string() +
                         " -o " + (dir / "twice").string());
  EXPECT_NE(twice.status, 0);
  EXPECT_NE(twice.output.find("are the same profile"), std::string::npos) << twice.output;
  EXPECT_NE(twice.output.find(".cspbundle@"), std::string::npos) << twice.output;
}

// What a rank killed before or while writing leaves: no profile at all, fewer threads than the
// other ranks, or a temporary of an unfinished profile. csp-prof-mpi used to say nothing; it now
// names each in its summary (and on stderr with -q) and in the database's property
// "measurement-warnings", the same for any process count; a complete measurement has none.
TEST(ProfWarnings, MissingRanksThreadsAndTemporariesAreNamed) {
  TempDir dir("prof-missing");
  const auto meas = dir / "meas";
  auto r = run("timeout -k 5 60 " + tool("csp-gen") + " -q --ranks 6 --threads 3 --nodes 30 -o " + meas.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto complete =
      run(limited(120, 2) + tool("csp-prof-mpi") + " " + meas.string() + " -o " + (dir / "db0").string());
  ASSERT_EQ(complete.status, 0) << complete.output;
  EXPECT_EQ(complete.output.find("warning"), std::string::npos) << complete.output;
  for (const auto& e : fs::directory_iterator(meas)) {
    const std::string name = e.path().filename().string();
    if (name.find("-r000002-") != std::string::npos || name.find("-r000004-t0001") != std::string::npos ||
        name.find("-r000005-t0002") != std::string::npos)
      fs::remove(e.path());
  }
  std::ofstream(meas / "n0000-r000004-t0001.1234.cspprof.tmp.1234.AbCdEf");  // 0 bytes, as a killed writer left it
  const std::string expected[] = {
      "warning: rank 2 left no profile, though ranks up to 5 did",
      "warning: ranks 4-5 have 2 thread profiles, most ranks have 3: profiles may be missing",
      "warning: 1 unfinished profile temporary left by a measurement killed while writing (those profiles are missing; "
      "remove them): " +
          (meas / "n0000-r000004-t0001.1234.cspprof.tmp.1234.AbCdEf").string()};
  for (int ranks : {1, 3}) {
    const auto db = dir / ("db" + std::to_string(ranks));
    r = run(limited(120, ranks) + tool("csp-prof-mpi") + " " + meas.string() + " -o " + db.string());
    ASSERT_EQ(r.status, 0) << r.output;
    for (const auto& line : expected)
      EXPECT_NE(r.output.find("  " + line), std::string::npos) << ranks << ": " << r.output;
    const auto quiet =
        run(limited(120, ranks) + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string() + " --force");
    ASSERT_EQ(quiet.status, 0) << quiet.output;
    for (const auto& line : expected)
      EXPECT_NE(quiet.output.find("csp-prof-mpi: " + line), std::string::npos) << ranks << ": " << quiet.output;
    EXPECT_NE(views(db, "--info").find("measurement-warnings = rank 2 left no profile"), std::string::npos);
  }
}

// A rank that reaches a collective before a slow peer waits without polling a core (which the
// peer's threads could use): rank 1 sleeps 3 s at the start of the read phase, rank 0 reads its
// share and waits for it at the next collective. Each rank's shell writes the CPU time of its
// csp-prof-mpi (bash's `times`); rank 0's stays far below the 3 s it waited. With MPI_Wait
// (which polls) it was 3.05 s.
TEST(ProfWaits, ARankWaitingForASlowPeerDoesNotTakeACore) {
  TempDir dir("prof-wait");
  const auto meas = unevenInput(dir, 16);
  const auto times = dir / "times";
  const std::string each = R"sh(bash -c '"$@"; status=$?; times > )sh" + times.string() +
                           R"sh(.$OMPI_COMM_WORLD_RANK; exit $status' each )sh";
  const auto start = std::chrono::steady_clock::now();
  const auto r = run("CSP_FAULT_INJECT=1:read:sleep3000 " + limited(60, 2) + each + tool("csp-prof-mpi") + " -q -j 1 " +
                     meas.string() + " -o " + (dir / "db").string());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_GE(wall, 3.0) << "the injected sleep did not happen";
  // The second line: the user and system time of the shell's children ("0m0.120s 0m0.030s").
  std::ifstream in(times.string() + ".0");
  std::string shell, children;
  ASSERT_TRUE(std::getline(in, shell) && std::getline(in, children)) << "no times from rank 0";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(children, m, std::regex(R"((\d+)m([0-9.]+)s (\d+)m([0-9.]+)s)"))) << children;
  const double cpu = 60 * std::stod(m[1]) + std::stod(m[2]) + 60 * std::stod(m[3]) + std::stod(m[4]);
  EXPECT_LT(cpu, 1.0) << "rank 0 used " << cpu << " s of CPU while it waited 3 s for rank 1";
}

// The read's balancing (docs/postprocessing.md, "Balancing"): a rank that starts reading late
// (1.5 s, CSP_FAULT_INJECT sleep) finds the batches it shares with its neighbours taken by them,
// and the database is still the one-process one. 64 profiles of about equal size in batches of 4:
// static shares of 8 batches at -np 2, the middle 8 shared. With --no-balance the shares stay.
TEST(ProfBalance, ALateRankLeavesItsSharedBatchesToItsNeighbours) {
  TempDir dir("prof-balance");
  const auto meas = dir / "meas";
  const auto gen = run(tool("csp-gen") + " -q --ranks 16 --threads 4 --nodes 300 --seed 11 -o " + meas.string());
  ASSERT_EQ(gen.status, 0) << gen.output;
  auto prof = [&](int ranks, const std::string& inject, const std::string& options, const std::string& name) {
    const auto r =
        run((inject.empty() ? "" : "CSP_FAULT_INJECT=" + inject + " ") + limited(60, ranks) + tool("csp-prof-mpi") +
            " -j 1 --batch 4 " + options + " " + meas.string() + " -o " + (dir / name).string());
    EXPECT_EQ(r.status, 0) << r.output;
    return r.output;
  };
  // "profiles per rank A to B (...)": the fewest and the most profiles of a rank.
  auto perRank = [](const std::string& output) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(output, m, std::regex(R"(profiles per rank (\d+) to (\d+) \(([a-z ]+))"))) << output;
    return m.empty() ? std::tuple<int, int, std::string>{-1, -1, ""}
                     : std::tuple<int, int, std::string>{std::stoi(m[1]), std::stoi(m[2]), m[3]};
  };
  prof(1, "", "-q", "np1");
  const auto reference = csp::test::dumpDatabase(dir / "np1");
  ASSERT_FALSE(reference.empty());

  // Two ranks, rank 1 late: rank 0 reads its own quarter and the shared half (48 profiles).
  const auto [fewest, most, how] = perRank(prof(2, "1:read:sleep1500", "", "np2"));
  EXPECT_EQ(how, "balanced in the read between ranks on one host");
  EXPECT_EQ(fewest + most, 64);
  EXPECT_GE(most - fewest, 16) << "rank 0 did not take over rank 1's shared batches";
  EXPECT_EQ(csp::test::dumpDatabase(dir / "np2"), reference);

  // The same without balancing: each rank reads its static share, about half.
  const auto [staticFewest, staticMost, staticHow] = perRank(prof(2, "1:read:sleep1500", "--no-balance", "np2s"));
  EXPECT_EQ(staticHow, "static shares");
  EXPECT_LE(staticMost - staticFewest, 8);
  EXPECT_EQ(csp::test::dumpDatabase(dir / "np2s"), reference);

  // Three ranks, the middle one late: both its sides are shared, its neighbours read them all.
  const auto [middleFewest, middleMost, middleHow] = perRank(prof(3, "1:read:sleep1500", "", "np3"));
  EXPECT_EQ(middleFewest, 0) << "the late middle rank still read profiles";
  EXPECT_EQ(csp::test::dumpDatabase(dir / "np3"), reference);
}

class ProfFailure : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("prof-failure");
    meas_ = unevenInput(*dir_, 64);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  struct Outcome {
    int status;
    std::string output;
    double seconds;
  };
  // One run at `ranks` processes with CSP_FAULT_INJECT=`inject`, writing `name`.
  Outcome prof(int ranks, const std::string& inject, const std::string& name, const std::string& env = "") {
    const auto start = std::chrono::steady_clock::now();
    const auto r = run("CSP_FAULT_INJECT=" + inject + " " + env + " " + limited(30, ranks) + tool("csp-prof-mpi") +
                       " -q -j 1 --batch 8 " + meas_.string() + " -o " + (dir_->path() / name).string());
    return {r.status, r.output, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  }
  void expectCleanFailure(const Outcome& o, const std::string& name, const std::string& what) {
    EXPECT_NE(o.status, 124) << what << ": not over within 30 s\n" << o.output;
    EXPECT_NE(o.status, 0) << what << "\n" << o.output;
    EXPECT_FALSE(fs::exists(dir_->path() / name)) << what << ": a database was published";
    EXPECT_FALSE(hasTemporary(dir_->path())) << what << ": a temporary directory is left";
  }

  static TempDir* dir_;
  static fs::path meas_;
};

TempDir* ProfFailure::dir_ = nullptr;
fs::path ProfFailure::meas_;

// Each phase, each rank of four in turn (the root and the others; one test per phase, so that
// ctest runs them side by side).
class ProfFailurePhase : public ProfFailure, public ::testing::WithParamInterface<std::string> {};

TEST_P(ProfFailurePhase, EachRankFailingStopsTheJobWithItsMessage) {
  const std::string phase = GetParam();
  const int ranks = 4;
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string what = "-np " + std::to_string(ranks) + ", rank " + std::to_string(rank) + " fails in " + phase;
    const auto o = prof(ranks, std::to_string(rank) + ":" + phase, "db-" + phase);
    expectCleanFailure(o, "db-" + phase, what);
    EXPECT_NE(o.output.find("csp-prof-mpi: error: injected failure in phase '" + phase + "'"), std::string::npos)
        << what << "\n"
        << o.output;
    EXPECT_NE(
        o.output.find("(reported by rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " processes)"),
        std::string::npos)
        << what << "\n"
        << o.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Phases, ProfFailurePhase,
                         ::testing::Values("read", "structure", "metrics", "exchange", "merge", "publish"));

// The root failing right after it created the database (fault point "output", reached by the
// root only): the database is closed before the error travels (RocksDB's own checks would abort
// the process on a database deleted with its column families open), and the job ends cleanly.
TEST_F(ProfFailure, RootFailingRightAfterCreatingTheDatabaseStopsTheJob) {
  const auto o = prof(3, "0:output", "db-output");
  expectCleanFailure(o, "db-output", "rank 0 fails in output");
  EXPECT_NE(o.output.find("csp-prof-mpi: error: injected failure in phase 'output'"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("(reported by rank 0 of 3 processes)"), std::string::npos) << o.output;
}

TEST_F(ProfFailure, SeveralFailingRanks) {
  // The same phase: both ranks named, the message once.
  auto o = prof(4, "1:read,3:read", "db");
  expectCleanFailure(o, "db", "ranks 1 and 3 in read");
  EXPECT_NE(o.output.find("csp-prof-mpi: error: injected failure in phase 'read' (CSP_FAULT_INJECT)\n"
                          "(reported by ranks 1, 3 of 4 processes)"),
            std::string::npos)
      << o.output;
  // Different phases: the first failure ends the job before the later phase is reached.
  o = prof(4, "1:structure,3:read", "db");
  expectCleanFailure(o, "db", "rank 3 in read, rank 1 in structure");
  EXPECT_NE(o.output.find("injected failure in phase 'read' (CSP_FAULT_INJECT)\n(reported by rank 3 of 4 processes)"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("phase 'structure'"), std::string::npos) << o.output;
}

TEST_F(ProfFailure, StuckPeerAbortsTheJobAfterTheGracePeriod) {
  // Rank 1 is busy for minutes while rank 2 fails: rank 2 cannot wait for it and aborts the job.
  // In the read, rank 0 meanwhile reads the batches it shares with rank 1 (the balancing).
  for (const std::string phase : {"read", "metrics", "exchange", "publish"}) {
    const auto o = prof(3, "1:" + phase + ":stall,2:" + phase, "db", "CSP_FAILURE_GRACE_SECONDS=2");
    expectCleanFailure(o, "db", "stall in " + phase);
    EXPECT_NE(o.output.find("csp-prof-mpi: error: injected failure in phase '" + phase +
                            "' (CSP_FAULT_INJECT)\n(reported by rank 2 of 3 processes)"),
              std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("did not reach the failure agreement within 2 s; aborting"), std::string::npos) << o.output;
    EXPECT_LT(o.seconds, 20.0) << o.output;
  }
}

TEST_F(ProfFailure, KilledRankEndsTheJob) {
  // 1:read:kill: rank 1 dies before it claims a batch; ranks 0 and 2 take its shared batches.
  for (const auto& inject : {"1:read:kill", "2:metrics:kill", "0:merge:kill", "1:exchange:kill", "0:publish:kill"}) {
    const auto o = prof(3, inject, "db");
    expectCleanFailure(o, "db", inject);
  }
}

// The processes of a run, found by the unique output name on their command lines.
int processesWriting(const std::string& name) {
  const auto r = run("pgrep -f -- '-o [^ ]*/" + name + "$' | wc -l");
  return std::atoi(r.output.c_str());
}

TEST_F(ProfFailure, TerminatedOrKilledLauncherLeavesNothingBehind) {
  for (int sig : {SIGTERM, SIGKILL}) {
    const std::string name = "db-signal-" + std::to_string(sig);
    const std::string command = "CSP_FAULT_INJECT=1:metrics:stall " + csp::test::mpirun(3) + tool("csp-prof-mpi") +
                                " -q -j 1 " + meas_.string() + " -o " + (dir_->path() / name).string() +
                                " >/dev/null 2>&1 & echo $!";
    const int launcher = std::atoi(run(command).output.c_str());
    ASSERT_GT(launcher, 0);
    // Wait until the run has its temporary directory (the stall holds it in the metrics phase).
    for (int i = 0; i < 200 && !hasTemporary(dir_->path()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(hasTemporary(dir_->path()));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(launcher, sig);
    int left = -1;
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = processesWriting(name);
      if (left == 0 && !hasTemporary(dir_->path())) break;
    }
    EXPECT_EQ(left, 0) << "signal " << sig << ": ranks still running 10 s after the launcher";
    EXPECT_FALSE(hasTemporary(dir_->path())) << "signal " << sig;
    EXPECT_FALSE(fs::exists(dir_->path() / name)) << "signal " << sig;
    ::waitpid(launcher, nullptr, WNOHANG);
  }
}

// SIGTERM to mpirun while rank 0 creates the database (fault point "output": the temporary
// directory and its RocksDB instance exist), on a loaded machine, at 4 processes, several times.
// The directory used to exist before any process would remove it on a termination signal: it
// survived with its RocksDB files, and nothing was said. Now every rank knows it beforehand.
TEST_F(ProfFailure, TerminatedWhileCreatingTheOutputLeavesNothing) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string name = "db-output-" + std::to_string(attempt);
    const std::string command = "CSP_FAULT_INJECT=0:output:stall " + csp::test::mpirun(4) + tool("csp-prof-mpi") +
                                " -q -j 1 " + meas_.string() + " -o " + (dir_->path() / name).string() +
                                " >/dev/null 2>&1 & echo $!";
    const int launcher = std::atoi(run(command).output.c_str());
    ASSERT_GT(launcher, 0);
    for (int i = 0; i < 400 && !hasTemporary(dir_->path()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(hasTemporary(dir_->path())) << "attempt " << attempt;
    // Loaded from here until the processes are gone: the termination must hold up under load
    // (hogs for the whole test took both cores from the tests beside it while the job started).
    std::optional<CpuHogs> hogs(std::in_place);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(launcher, SIGTERM);
    int left = -1;
    for (int i = 0; i < 150; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = processesWriting(name);
      if (left == 0) break;
    }
    hogs.reset();
    EXPECT_EQ(left, 0) << "attempt " << attempt << ": processes still running 15 s after SIGTERM";
    EXPECT_FALSE(hasTemporary(dir_->path())) << "attempt " << attempt << ": the temporary directory survived";
    EXPECT_FALSE(fs::exists(dir_->path() / name)) << "attempt " << attempt;
    ::waitpid(launcher, nullptr, WNOHANG);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_->path()))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove_all(e.path(), ec);
  }
}

TEST_F(ProfFailure, FullOutputFileSystemStopsEveryRank) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  // File systems too small at different points of the run (staging, merge, ingest), then big enough.
  const auto small = dir_->path() / "small-fs";
  fs::create_directories(small);
  int failures = 0, successes = 0;
  for (const std::string size : {"64k", "256k", "512k", "1m", "2m", "16m"}) {
    ASSERT_EQ(::mount("tmpfs", small.c_str(), "tmpfs", 0, ("size=" + size).c_str()), 0) << std::strerror(errno);
    const auto r = run(limited(30, 3) + tool("csp-prof-mpi") + " -q -j 1 --batch 8 " + meas_.string() + " -o " +
                       (small / "db").string());
    const bool temporaryLeft = hasTemporary(small), published = fs::exists(small / "db");
    ::umount2(small.c_str(), MNT_DETACH);
    EXPECT_NE(r.status, 124) << size << ": hung on a full file system\n" << r.output;
    EXPECT_FALSE(temporaryLeft) << size;
    if (r.status == 0) {
      ++successes;
      EXPECT_TRUE(published) << size;
    } else {
      ++failures;
      EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << size << "\n" << r.output;
      EXPECT_FALSE(published) << size;
    }
  }
  EXPECT_GT(failures, 0);
  EXPECT_GT(successes, 0);
}

// The values pass reads each profile's values from a spill file in CSP_SPILL_DIR, else $TMPDIR
// (docs/cli.md): a directory too small for it stops every rank with one line naming the spill
// file and the setting, leaves no database, and never hangs; a large enough one gives the
// database. (CSP_SPILL_DIR, not TMPDIR: Open MPI's own session files go to TMPDIR, and a full one
// stops mpirun before csp-prof-mpi starts.)
TEST_F(ProfFailure, FullTemporaryDirectoryStopsEveryRankAndNamesIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const auto small = dir_->path() / "small-tmp", meas = dir_->path() / "meas-spill";
  fs::create_directories(small);
  // 32 profiles of 2,000 contexts: ~2.5 MB of input, some 100 KiB of spill per process.
  ASSERT_EQ(
      run("timeout -k 5 60 " + tool("csp-gen") + " -q --ranks 8 --threads 4 --nodes 2000 -o " + meas.string()).status,
      0);
  for (const std::string size : {"16k", "64m"}) {
    ASSERT_EQ(::mount("tmpfs", small.c_str(), "tmpfs", 0, ("size=" + size).c_str()), 0) << std::strerror(errno);
    const auto db = dir_->path() / ("db-tmp-" + size);
    const auto r = run("CSP_SPILL_DIR=" + small.string() + " " + limited(60, 3) + tool("csp-prof-mpi") + " -q -j 1 " +
                       meas.string() + " -o " + db.string());
    ::umount2(small.c_str(), MNT_DETACH);
    EXPECT_NE(r.status, 124) << size << ": hung on a full temporary directory\n" << r.output;
    if (size == "16k") {
      EXPECT_NE(r.status, 0) << r.output;
      EXPECT_NE(r.output.find("projection spill file"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("CSP_SPILL_DIR"), std::string::npos) << r.output;
      EXPECT_FALSE(fs::exists(db));
      EXPECT_FALSE(hasTemporary(dir_->path()));
    } else {
      EXPECT_EQ(r.status, 0) << r.output;
      EXPECT_TRUE(fs::exists(db));
    }
  }
}

}  // namespace
