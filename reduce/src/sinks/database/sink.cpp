// The CSP database as an output of the pipeline (prof.hpp's OutputSink, docs/database-format.md):
// values in both orders and summaries written by every rank into shards of its own, combined,
// ingested by the root and published atomically. The steps are in stages.hpp.
#include <fmt/format.h>
#include <tbb/parallel_invoke.h>

#include <unistd.h>

#include <chrono>
#include <future>
#include <optional>

#include "csp/storage/database_writer.hpp"
#include "csp/storage/string_ids.hpp"
#include "stages.hpp"

namespace csp::reduce {

namespace fs = std::filesystem;

namespace {

using namespace dbsink;

std::vector<std::byte> toBytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string toString(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

class PhaseClock {
 public:
  void mark(std::string phase) {
    const auto now = std::chrono::steady_clock::now();
    phases.push_back({std::move(phase), std::chrono::duration<double>(now - last_).count()});
    last_ = now;
  }
  void restart() { last_ = std::chrono::steady_clock::now(); }
  std::vector<PhaseTime> phases;

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// The unit each metric's per-thread values are stored in (docs/database-format.md, format 2.0):
// a count metric's period, so that the stored values are sample counts (exact for any value).
std::vector<std::uint64_t> valueScales(const std::vector<MetricDescriptor>& metrics) {
  std::vector<std::uint64_t> scales;
  scales.reserve(metrics.size());
  for (const auto& m : metrics)
    scales.push_back(m.valueType == ValueType::Count ? std::max<std::uint64_t>(m.period, 1) : 1);
  return scales;
}

// The writers of one rank, from the structure on.
struct Writers {
  Writers(const Comm& comm, const fs::path& staging, Pipeline& pipeline)
      : plan(comm),
        scales(valueScales(pipeline.metrics())),
        leaves(leavesOf(pipeline.cct())),
        mainShard(staging, plan.main, {.valueScales = scales}),
        byNode(staging, plan, leaves, scales),
        summaries(leaves, pipeline.metrics(), pipeline.threadClassOf()),
        regions(pipeline.regions().size()) {}
  const ShardPlan plan;
  const std::vector<std::uint64_t> scales;  // by metric: the unit its values are stored in
  const std::vector<std::uint8_t> leaves;   // by node of the canonical CCT: whether it has no children
  storage::ShardWriter mainShard;
  NodeValueSink byNode;
  SummaryTable summaries;
  RegionSummaries regions;
};

class DatabaseSink final : public OutputSink {
 public:
  explicit DatabaseSink(DatabaseSinkOptions options) : options_(std::move(options)) {}

  void open(const Comm& comm) override { staging_ = openOutput(comm); }

  void begin(const Comm& comm, Pipeline& pipeline) override {
    if (opening_.valid()) opening_.get();  // the root's database, created while the others read
    pipeline_ = &pipeline;
    writers_.emplace(comm, staging_, pipeline);
    pipeline.encodeValuesByProfile(writers_->scales);  // encoded in the values pass, in the shard's units
  }

  // Each batch goes to the writers side by side: values by profile; values by node with the
  // summaries (one walk over the values, node by node); the regions.
  void write(std::size_t batchIndex, std::span<const ProfileInfo> batch, const std::vector<ThreadValues>& values,
             const std::vector<RegionValues>& regionValues) override {
    const auto start = std::chrono::steady_clock::now();
    auto& w = *writers_;
    pipeline_->arena().execute([&] {
      tbb::parallel_invoke([&] { timed(byProfileSeconds_, [&] { writeValuesByProfile(w.mainShard, batch, values); }); },
                           [&] {
                             timed(byNodeSeconds_, [&] {
                               w.summaries.beginBatch(batchIndex, batch);
                               w.byNode.write(batch, values, w.summaries);
                             });
                           },
                           [&] { timed(regionSeconds_, [&] { w.regions.accumulate(batch, regionValues); }); });
    });
    writeSeconds_ += secondsSince(start);
  }

  void finish(const Comm& comm, Pipeline& pipeline, ProfSummary& summary) override;
  void publish(const Comm& comm, ProfSummary& summary) override;
  void stop() noexcept override { writers_.reset(); }
  void abandon() noexcept override {
    writers_.reset();
    if (opening_.valid()) opening_.wait();  // its error, if any, is not the one to report
    builder_.reset();
  }

 private:
  fs::path openOutput(const Comm& comm);
  void writeRoot(Pipeline& pipeline, const std::vector<std::vector<std::byte>>& regionParts,
                 const std::vector<std::vector<std::byte>>& identities, ProfSummary& summary);

  static double secondsSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  template <typename F>
  static void timed(double& seconds, F&& work) {
    const auto start = std::chrono::steady_clock::now();
    work();
    seconds += secondsSince(start);
  }

  DatabaseSinkOptions options_;
  fs::path staging_;
  // Lives until every rank has stopped writing into its temporary directory (abandon()).
  std::optional<storage::DatabaseBuilder> builder_;  // root only
  // The root's builder creating its database (openDatabase) beside discovery and the read;
  // joined in begin(). Declared after builder_: destroyed (waited for) first.
  std::future<void> opening_;
  std::optional<Writers> writers_;
  Pipeline* pipeline_ = nullptr;
  // The batches' writing, and each writer's share (they run side by side: the shares overlap).
  double writeSeconds_ = 0, byProfileSeconds_ = 0, byNodeSeconds_ = 0, regionSeconds_ = 0;
  PhaseClock clock_;
};

// The output, before any heavy work: every rank learns the temporary directory and arms its
// removal on a termination signal before the root creates it (a directory that exists before
// every rank would remove it outlived SIGTERM to mpirun), then the root creates the database
// builder (failing fast on a bad target).
fs::path DatabaseSink::openOutput(const Comm& comm) {
  // "<pid> <host>\n<directory>" of the root.
  std::vector<std::byte> owner;
  if (comm.rank() == 0)
    owner = toBytes(fmt::format("{} {}\n{}", ::getpid(), hostName(),
                                storage::DatabaseBuilder::temporaryDirectoryFor(options_.output).string()));
  comm.broadcast(owner);
  const std::string text = toString(owner);
  const auto newline = text.find('\n');
  const fs::path tempDir = text.substr(newline + 1);
  const auto space = text.find(' ');
  const bool sameHost = text.substr(space + 1, newline - space - 1) == hostName();
  if (options_.onTempDir) options_.onTempDir(tempDir, sameHost ? std::stoi(text.substr(0, space)) : 0);
  comm.onAbort([tempDir] {
    std::error_code ec;
    fs::remove_all(tempDir, ec);
  });
  if (comm.rank() == 0) {
    // Fault point "output": the database directory exists, nothing else is done yet.
    auto step = [&comm](std::string_view s) {
      if (s == "created") faultPoint(comm, "output");
    };
    builder_.emplace(options_.output, storage::BuildOptions{options_.force, step, /*openLater=*/true});
    if (options_.onLeftover)
      for (const auto& l : builder_->leftovers())
        options_.onLeftover(l.removed, fmt::format("{}: {}", l.path.string(), l.reason));
    // The target is checked and the directories exist (a bad target has failed by now); the
    // RocksDB instance, tens of milliseconds of files and fsyncs, is made while the ranks list and
    // read their inputs instead of before.
    opening_ = std::async(std::launch::async, [builder = &*builder_] { builder->openDatabase(); });
  }
  return storage::DatabaseBuilder::stagingDirIn(tempDir);
}

// Combine: summaries to the owners of their node ranges; regions and identities to the root,
// which writes the CCT, the regions and the metadata.
void DatabaseSink::finish(const Comm& comm, Pipeline& pipeline, ProfSummary& summary) {
  auto& w = *writers_;
  clock_.phases.push_back({"  of which: write + accumulate", writeSeconds_});
  // Encoding is ours; storing is RocksDB's table writer (blocks, compression, files).
  const double profileStore = w.mainShard.storeSeconds(), nodeStore = w.byNode.storeSeconds();
  clock_.phases.push_back({"  busy encoding values by profile", byProfileSeconds_ - profileStore});
  clock_.phases.push_back({"  busy storing values by profile", profileStore});
  clock_.phases.push_back({"  busy encoding values by node + accumulating summaries", byNodeSeconds_ - nodeStore});
  clock_.phases.push_back({"  busy storing values by node", nodeStore});
  clock_.phases.push_back({"  busy accumulating region summaries", regionSeconds_});
  clock_.restart();
  w.byNode.merge(comm);
  clock_.mark("merge values by node");
  w.regions.addConcurrency(comm, pipeline, w.mainShard);
  w.summaries.exchangeAndWrite(comm, w.mainShard);
  const auto regionParts = w.regions.gather(comm);
  const auto identities = gatherIdentities(comm, pipeline);
  if (comm.rank() == 0)
    writeRoot(pipeline, regionParts, identities, summary);  // finishes the main shard
  else
    w.mainShard.finish();
  clock_.mark("combine + metadata");
  // Its phases so far into the summary now: the slowest ranks are found before publication.
  summary.phases.insert(summary.phases.end(), clock_.phases.begin(), clock_.phases.end());
  clock_.phases.clear();
}

void DatabaseSink::writeRoot(Pipeline& pipeline, const std::vector<std::vector<std::byte>>& regionParts,
                             const std::vector<std::vector<std::byte>>& identities, ProfSummary& summary) {
  auto& w = *writers_;
  storage::StringIds strings;  // texts in order of first use by the final CCT, then region names
  w.mainShard.putCct(cctNodes(pipeline, strings));
  RegionSummaries::write(regionParts, pipeline.regions(), strings, w.mainShard);
  auto meta = assembleMetadata(options_.title, pipeline, identities, summary.measurementWarnings);
  for (const auto& p : meta.properties)
    if (p.key == "dropped-samples-by-cause") summary.droppedByCause = p.value;
  meta.strings = strings.take();
  summary.quality = meta.qualityTotal();
  summary.unwindRecovery = *meta.unwindRecovery;
  summary.moduleLoops = meta.moduleLoops;
  w.mainShard.finish();
  builder_->writeMetadata(meta);
}

// Every rank's shards are complete once the sum is through; then the root publishes and the last
// check tells the others whether it did.
void DatabaseSink::publish(const Comm& comm, ProfSummary& summary) {
  faultPoint(comm, "publish");
  summary.valuesWritten = comm.sum(writers_->mainShard.valuesWritten());
  if (comm.rank() == 0) {
    builder_->ingestShards(writers_->plan.total);
    builder_->publish();
    summary.databaseBytes = storage::directoryBytes(options_.output);
  }
  comm.barrier();
  clock_.mark("ingest + publish");
  summary.phases.insert(summary.phases.end(), clock_.phases.begin(), clock_.phases.end());
  writers_.reset();
}

}  // namespace

std::shared_ptr<OutputSink> cspDatabaseSink(DatabaseSinkOptions options) {
  return std::make_shared<DatabaseSink>(std::move(options));
}

}  // namespace csp::reduce
