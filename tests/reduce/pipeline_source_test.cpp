// The source seam of csp-prof-mpi's pipeline (reduce/include/csp/reduce/profile_source.hpp): a
// fake input format passed in PipelineOptions::sources, run through runProf in this process (an
// MPI singleton), its database read back. The fake format's profiles use what CSP's own files
// cannot hold: a real-valued metric, GPU id kinds, partial and placeholder path starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>

#include "common/test_support.hpp"
#include "csp/reduce/prof.hpp"
#include "csp/storage/database.hpp"

namespace {

using namespace csp;

// MPI for the whole test program, as csp-prof-mpi has it (not started without a launcher):
// runProf needs a communicator, world().
std::unique_ptr<reduce::MpiSession> session;
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    static int argc = 0;
    static char** argv = nullptr;
    session = std::make_unique<reduce::MpiSession>(argc, argv);
  }
  void TearDown() override { session.reset(); }
};
const auto* const kMpi = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);
MPI_Comm world() { return session->world(); }

constexpr double kGpuSeconds = 0.25;  // of profile k: (k + 1) x this, exact in binary

// One thread of a GPU stream, profile k of "tK.fake": a host path main -> app.c:5, a placeholder
// for the GPU kernel launched elsewhere (<gpu kernel> -> gemm -> gpu.cu:10, which also carries the
// real-valued GPU time) and a path whose unwind did not reach the entry (lost -> app.c:9).
ThreadProfile fakeProfile(std::uint64_t k) {
  ThreadProfile p;
  p.identity.idTuple = {{IdKind::Rank, 0}, {IdKind::GpuContext, 1}, {IdKind::GpuStream, k}};
  p.identity.pid = 100;
  p.identity.hostname = "gpu-host";
  p.identity.executable = "/bin/app";
  p.metrics = {{"cycles", "cycles", MetricKind::Sampled, 1000, "sampled cycles"},
               {"gpu-seconds", "s", MetricKind::Counted, 1, "GPU kernel time", ValueType::Real}};
  p.frameKind = FrameKind::Symbolic;
  p.strings = {"", "main", "app.c", "libapp.so", "<gpu kernel>", "gemm", "gpu.cu", "lost"};
  p.symbolicFrames = {{ScopeKind::ProcFrame, 1, 2, 1, 3}, {ScopeKind::Stmt, 0, 2, 5, 0},
                      {ScopeKind::ProcFrame, 4, 0, 0, 0}, {ScopeKind::CallSite, 0, 0, 0, 0},
                      {ScopeKind::ProcFrame, 5, 6, 3, 3}, {ScopeKind::Stmt, 0, 6, 10, 0},
                      {ScopeKind::ProcFrame, 7, 2, 8, 3}, {ScopeKind::Stmt, 0, 2, 9, 0}};
  p.cct.parent = {kNoIndex, 0, 1, 0, 3, 4, 5, 0, 7};
  p.cct.frame = {kNoIndex, 0, 1, 2, 3, 4, 5, 6, 7};
  p.cct.pathStart = {PathStart::Unknown,     PathStart::Complete, PathStart::Unknown,
                     PathStart::Placeholder, PathStart::Unknown,  PathStart::Unknown,
                     PathStart::Unknown,     PathStart::Partial,  PathStart::Unknown};
  p.values.node = {2, 6, 6, 8};
  p.values.metric = {0, 0, 1, 0};
  p.values.count = {10 + k, 50, realBits(kGpuSeconds * double(k + 1)), 3};
  p.stats.samples = (10 + k) + 50 + 3;
  return p;
}

// "*.fake" files; the profile is made up from the file name, the file's bytes are its size.
class FakeSource : public reduce::ProfileSource {
 public:
  explicit FakeSource(reduce::SourceProvides provides = {.symbolicFrames = true,
                                                         .realMetrics = true,
                                                         .pathStarts = true,
                                                         .gpuIdentities = true})
      : provides_(provides) {}
  reduce::SourceProvides provides() const override { return provides_; }
  std::string pattern() const override { return "*.fake"; }
  bool isProfile(const std::filesystem::path& file) const override { return file.extension() == ".fake"; }
  std::vector<std::string> list(const std::filesystem::path& dir) const override {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (isProfile(e.path())) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  ThreadProfile read(const std::filesystem::path& entry) const override {
    const auto k = std::stoull(entry.stem().string().substr(1));
    ++reads;
    ThreadProfile p = fakeProfile(k);
    if (unsorted && k == 1) std::swap(p.values.node[0], p.values.node[3]);
    return p;
  }
  std::vector<std::string> unfinished(const std::filesystem::path& dir) const override {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().string().ends_with(".fake.part")) out.push_back(e.path().string());
    return out;
  }
  std::string workMetric() const override { return "cycles"; }

  bool unsorted = false;  // profile 1 comes with its values out of order
  mutable std::atomic<unsigned> reads{0};

 private:
  reduce::SourceProvides provides_;
};

std::shared_ptr<reduce::OutputSink> databaseAt(const std::filesystem::path& output) {
  reduce::DatabaseSinkOptions o;
  o.output = output;
  return reduce::cspDatabaseSink(std::move(o));
}

class PipelineSource : public ::testing::Test {
 protected:
  PipelineSource() : dir_("pipeline-source") {
    std::filesystem::create_directories(dir_ / "meas");
    for (const char* name : {"t0.fake", "t1.fake", "t2.fake", "t9.fake.part"})
      std::ofstream(dir_ / "meas" / name) << "x";
  }

  reduce::ProfOptions options(std::shared_ptr<const reduce::ProfileSource> source) const {
    reduce::ProfOptions o;
    o.pipeline.sources = {std::move(source)};
    o.pipeline.inputs = {dir_ / "meas"};
    o.pipeline.jobs = 2;
    o.pipeline.attribution.structureCache = "off";
    o.sinks = {databaseAt(dir_ / "db")};
    return o;
  }

  // The message of a run that fails (a sink is used once: each run gets a fresh one).
  std::string failure(reduce::ProfOptions o) const {
    o.sinks = {databaseAt(dir_ / "db")};
    reduce::Comm comm(world());
    try {
      reduce::runProf(comm, o);
    } catch (const reduce::PipelineError& e) {
      EXPECT_FALSE(std::filesystem::exists(dir_ / "db")) << "nothing half-written";
      return e.what();
    }
    return "(no failure)";
  }

  csp::test::TempDir dir_;
};

const storage::CctNode* findProcedure(const std::vector<storage::CctNode>& cct, const storage::DatabaseMetadata& meta,
                                      const std::string& name) {
  for (const auto& n : cct)
    if (n.kind == ScopeKind::ProcFrame && meta.strings[n.name] == name) return &n;
  return nullptr;
}

TEST_F(PipelineSource, FakeFormatWithRealMetricsGpuIdsAndPathStartsReachesTheDatabase) {
  reduce::Comm comm(world());
  const auto summary = reduce::runProf(comm, options(std::make_shared<FakeSource>()));
  EXPECT_EQ(summary.profiles, 3u);
  ASSERT_TRUE(std::any_of(summary.measurementWarnings.begin(), summary.measurementWarnings.end(), [](const auto& w) {
    return w.find("t9.fake.part") != std::string::npos;
  })) << "the source's unfinished files are reported";

  const auto db = storage::Database::open(dir_ / "db");
  const auto& meta = db->metadata();
  ASSERT_EQ(meta.metrics.size(), 2u);
  EXPECT_EQ(meta.metrics[0].valueType, storage::ValueType::Count);
  EXPECT_EQ(meta.metrics[1].descriptor.name, "gpu-seconds");
  EXPECT_EQ(meta.metrics[1].valueType, storage::ValueType::Real);
  ASSERT_EQ(meta.profiles.size(), 3u);
  for (std::uint64_t k = 0; k < 3; ++k)
    EXPECT_EQ(meta.profiles[k], (IdTuple{{IdKind::Rank, 0}, {IdKind::GpuContext, 1}, {IdKind::GpuStream, k}}));

  // The partial path below the truncated paths, its 3 samples counted as truncated; the
  // placeholder at the root in the placeholder module, and never a thread's entry.
  const auto cct = db->readCct();
  const auto* truncated = findProcedure(cct, meta, reduce::kTruncatedPathsName);
  const auto* lost = findProcedure(cct, meta, "lost");
  const auto* gpu = findProcedure(cct, meta, "<gpu kernel>");
  ASSERT_TRUE(truncated && lost && gpu);
  EXPECT_EQ(truncated->parent, 0u);
  EXPECT_EQ(cct[lost->parent].parent, static_cast<storage::NodeId>(truncated - cct.data()));
  EXPECT_EQ(gpu->parent, 0u);
  EXPECT_EQ(meta.strings[gpu->module], reduce::kPlaceholderModuleName);
  ASSERT_EQ(meta.quality.size(), 3u);
  ASSERT_EQ(meta.threadClasses.size(), 3u);
  for (std::uint64_t k = 0; k < 3; ++k) {
    EXPECT_EQ(meta.quality[k].truncatedSamples, 3u);
    EXPECT_EQ(meta.threadClasses[k].entry, "gemm") << "the placeholder is not the entry";
  }

  // Real values: the thread's total at the root and the procedure's own, bit for bit.
  const auto gemm = static_cast<storage::NodeId>(findProcedure(cct, meta, "gemm") - cct.data());
  for (std::uint32_t k = 0; k < 3; ++k) {
    const auto values = db->profileValues(k);
    auto valueAt = [&](storage::NodeId node, storage::MetricScope scope) {
      for (const auto& v : values)
        if (v.node == node && v.metric == 1 && v.scope == scope) return realValue(v.value);
      return -1.0;
    };
    EXPECT_EQ(valueAt(0, storage::MetricScope::Inclusive), kGpuSeconds * (k + 1));
    EXPECT_EQ(valueAt(gemm, storage::MetricScope::Exclusive), kGpuSeconds * (k + 1));
  }
}

// The values pass takes a region-less profile's projected values from the structure pass's spill
// instead of reading, validating and projecting it a second time (docs/postprocessing.md).
TEST_F(PipelineSource, ProfilesWithoutRegionsAreReadOnce) {
  auto source = std::make_shared<FakeSource>();
  reduce::Comm comm(world());
  const auto summary = reduce::runProf(comm, options(source));
  EXPECT_EQ(summary.profiles, 3u);
  EXPECT_EQ(source->reads.load(), 3u);
  const auto db = storage::Database::open(dir_ / "db");
  EXPECT_FALSE(db->profileValues(2).empty());
}

TEST_F(PipelineSource, ProfileHoldingWhatItsSourceDoesNotDeclareIsRefusedOrSkipped) {
  auto o = options(std::make_shared<FakeSource>(
      reduce::SourceProvides{.symbolicFrames = true, .pathStarts = true, .gpuIdentities = true}));
  const auto message = failure(o);
  EXPECT_NE(message.find("t0.fake: holds real-valued metrics, which its format's source does not declare"),
            std::string::npos)
      << message;
  o.pipeline.skipInvalid = true;
  EXPECT_EQ(failure(o), "no readable profiles in the input");
}

TEST_F(PipelineSource, EveryProfileIsValidatedAfterItsSourceReadsIt) {
  auto source = std::make_shared<FakeSource>();
  source->unsorted = true;
  auto o = options(source);
  const auto message = failure(o);
  EXPECT_NE(message.find("t1.fake: values are not sorted by (node, metric)"), std::string::npos) << message;

  o.pipeline.skipInvalid = true;
  reduce::Comm comm(world());
  const auto summary = reduce::runProf(comm, o);
  EXPECT_EQ(summary.profiles, 2u);
  ASSERT_EQ(summary.skipped.size(), 1u);
  EXPECT_NE(summary.skipped[0].path.find("t1.fake"), std::string::npos);
}

TEST_F(PipelineSource, InputsOfNoGivenSourceAreNamedWithTheSourcesPatterns) {
  auto o = options(std::make_shared<FakeSource>());
  o.pipeline.inputs = {dir_ / "meas" / "t9.fake.part"};
  EXPECT_NE(failure(o).find("neither a measurement directory nor a profile (*.fake)"), std::string::npos);
  o.pipeline.sources.clear();
  EXPECT_NE(failure(o).find("no input formats"), std::string::npos);
}

}  // namespace
