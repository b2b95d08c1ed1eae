// csp-prof-mpi as a library call: the output, the pipeline (pipeline.hpp), then the stages of
// prof_stages.hpp in order, and the one failure path of mpi_comm.hpp around all of them.
#include "csp/reduce/prof.hpp"

#include <fmt/format.h>
#include <tbb/parallel_invoke.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "csp/storage/database_writer.hpp"
#include "csp/storage/string_ids.hpp"
#include "prof_stages.hpp"

namespace csp::reduce {

namespace fs = std::filesystem;

namespace {

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

// The output, before any heavy work: every rank learns the temporary directory and arms its
// removal on a termination signal before the root creates it (a directory that exists before
// every rank would remove it outlived SIGTERM to mpirun), then the root creates the database
// builder (failing fast on a bad target).
fs::path openOutput(const Comm& comm, const ProfOptions& options, std::optional<storage::DatabaseBuilder>& builder) {
  // "<pid> <host>\n<directory>" of the root.
  std::vector<std::byte> owner;
  if (comm.rank() == 0)
    owner = toBytes(fmt::format("{} {}\n{}", ::getpid(), hostName(),
                                storage::DatabaseBuilder::temporaryDirectoryFor(options.output).string()));
  comm.broadcast(owner);
  const std::string text = toString(owner);
  const auto newline = text.find('\n');
  const fs::path tempDir = text.substr(newline + 1);
  const auto space = text.find(' ');
  const bool sameHost = text.substr(space + 1, newline - space - 1) == hostName();
  if (options.onTempDir) options.onTempDir(tempDir, sameHost ? std::stoi(text.substr(0, space)) : 0);
  comm.onAbort([tempDir] {
    std::error_code ec;
    fs::remove_all(tempDir, ec);
  });
  if (comm.rank() == 0) {
    // Fault point "output": the database directory exists, nothing else is done yet.
    auto step = [&comm](std::string_view s) {
      if (s == "created") faultPoint(comm, "output");
    };
    builder.emplace(options.output, storage::BuildOptions{options.force, step});
    if (options.onLeftover)
      for (const auto& l : builder->leftovers())
        options.onLeftover(l.removed, fmt::format("{}: {}", l.path.string(), l.reason));
  }
  return storage::DatabaseBuilder::stagingDirIn(tempDir);
}

// The stages on this rank. Any exception ends them here; runProf turns it into the job-wide
// failure. `builder` lives in the caller so that the temporary directory is removed only once
// every rank has stopped writing into it.
ProfSummary runStages(const Comm& comm, const ProfOptions& options, ProgressSink* progress,
                      std::optional<storage::DatabaseBuilder>& builder) {
  const bool root = comm.rank() == 0;
  ProfSummary summary;
  Pipeline pipeline(comm, options.pipeline, progress);
  const fs::path stagingDir = openOutput(comm, options, builder);

  pipeline.discover();
  pipeline.buildStructure();
  const auto nodeCount = static_cast<std::uint32_t>(pipeline.cct().size());
  const std::size_t metricCount = pipeline.metrics().size();
  const std::size_t rawCount = pipeline.rawMetricCount();

  // Metrics: each batch's values go to three sinks side by side while the pipeline computes
  // the next batch.
  const prof::ShardPlan plan(comm);
  storage::ShardWriter mainShard(stagingDir, plan.main);
  prof::NodeValueSink byNode(stagingDir, plan, nodeCount, metricCount);
  std::vector<std::uint64_t> periods;
  for (std::size_t m = 0; m < rawCount; ++m) periods.push_back(pipeline.metrics()[m].period);
  prof::SummaryTable summaries(nodeCount, std::move(periods), metricCount - rawCount, pipeline.threadClassOf());
  prof::RegionSummaries regions(pipeline.regions().size());
  double writeSeconds = 0;
  pipeline.computeMetrics([&](std::size_t batchIndex, std::span<const ProfileInfo> batch,
                              std::vector<ThreadValues>& values, std::vector<RegionValues>& regionValues) {
    const auto start = std::chrono::steady_clock::now();
    pipeline.arena().execute([&] {
      tbb::parallel_invoke([&] { prof::writeValuesByProfile(mainShard, batch, values); },
                           [&] { byNode.write(batch, values); },
                           [&] {
                             summaries.accumulate(batchIndex, batch, values);
                             regions.accumulate(batch, regionValues);
                           });
    });
    values.clear();
    writeSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  byNode.merge(comm);
  regions.addConcurrency(comm, pipeline, mainShard);
  PhaseClock clock;
  clock.phases.push_back({"  of which: write + accumulate", writeSeconds});

  // Combine: summaries to the owners of their node ranges; regions and identities to the root,
  // which writes the CCT, the regions and the metadata.
  clock.restart();
  summaries.exchangeAndWrite(comm, mainShard);
  const auto regionParts = regions.gather(comm);
  const auto identities = prof::gatherIdentities(comm, pipeline);
  if (root) {
    storage::StringIds strings;  // texts in order of first use by the final CCT, then region names
    mainShard.putCct(prof::cctNodes(pipeline, strings));
    prof::RegionSummaries::write(regionParts, pipeline.regions(), strings, mainShard);
    auto meta = prof::assembleMetadata(options, pipeline, identities, summary.measurementWarnings);
    for (const auto& p : meta.properties)
      if (p.key == "dropped-samples-by-cause") summary.droppedByCause = p.value;
    meta.strings = strings.take();
    summary.quality = meta.qualityTotal();
    summary.unwindRecovery = *meta.unwindRecovery;
    summary.moduleLoops = meta.moduleLoops;
    mainShard.finish();
    builder->writeMetadata(meta);
  } else {
    mainShard.finish();
  }
  clock.mark("combine + metadata");

  // Publish: every rank's shards are complete once the sum is through; then the root publishes
  // and the last check tells the others whether it did.
  faultPoint(comm, "publish");
  summary.valuesWritten = comm.sum(mainShard.valuesWritten());
  if (root) {
    builder->ingestShards(plan.total);
    builder->publish();
    summary.databaseBytes = storage::directoryBytes(options.output);
  }
  comm.barrier();
  clock.mark("ingest + publish");

  summary.inputs = pipeline.inputs().size();
  summary.profiles = pipeline.profileCount();
  summary.skipped = pipeline.skipped();
  summary.cctNodes = nodeCount;
  summary.metrics = metricCount;
  summary.regions = static_cast<std::uint32_t>(pipeline.regions().size());
  summary.phases = pipeline.phaseTimes();
  summary.phases.insert(summary.phases.end(), clock.phases.begin(), clock.phases.end());
  summary.attribution = pipeline.attributionStats();
  return summary;
}

}  // namespace

ProfSummary runProf(const Comm& comm, const ProfOptions& options, ProgressSink* progress) {
  std::optional<storage::DatabaseBuilder> builder;
  try {
    return runStages(comm, options, progress, builder);
  } catch (...) {
    std::string message;
    try {
      throw;
    } catch (const PeerFailure&) {
      // another rank failed; it reports why
    } catch (const std::exception& e) {
      message = e.what();
      if (message.empty()) message = "unknown error";
    } catch (...) {
      message = "unknown error";
    }
    const auto failures = comm.fail(message);
    builder.reset();  // every rank has stopped writing: the temporary directory goes
    throw PipelineError(comm.rank() == 0 ? comm.describe(failures) : std::string("failed; rank 0 reports why"));
  }
}

std::vector<std::string> qualityWarnings(const storage::SamplingQuality& q) {
  std::vector<std::string> out;
  if (q.samples == 0) return out;
  const double share = storage::kQualityWarningShare;
  auto percent = [&](std::uint64_t n) { return 100.0 * static_cast<double>(n) / static_cast<double>(q.samples); };
  if (static_cast<double>(q.truncatedSamples) > share * static_cast<double>(q.samples))
    out.push_back(fmt::format(
        "{:.1f} % of the samples ({} of {}) have truncated call paths that do not reach the program's or a thread's "
        "entry{}; they are shown below '{}' (docs/postprocessing.md, \"Path quality\")",
        percent(q.truncatedSamples), q.truncatedSamples, q.samples,
        q.depthLimited ? fmt::format(", {} of them cut at the depth limit (csp-run --max-depth)", q.depthLimited) : "",
        kTruncatedPathsName));
  if (static_cast<double>(q.droppedSamples) > share * static_cast<double>(q.samples))
    out.push_back(
        fmt::format("{:.1f} % of the samples ({} of {}) were dropped by the measurement and are missing from the "
                    "profiles",
                    percent(q.droppedSamples), q.droppedSamples, q.samples));
  return out;
}

std::vector<std::string> loopSummary(const std::vector<storage::ModuleLoops>& modules) {
  constexpr std::size_t kListed = 8;  // per line; csp-views --info lists them all
  std::uint64_t loops = 0, byAddress = 0, with = 0;
  std::vector<std::string> addressed, without;
  for (const auto& m : modules) {
    loops += m.loops;
    byAddress += m.byAddress;
    with += m.loops > 0 ? 1 : 0;
    if (m.byAddress > 0)
      addressed.push_back(
          fmt::format("{} {} of {}{}", m.module, m.byAddress, m.loops, m.note.empty() ? "" : " (" + m.note + ")"));
    if (m.loops == 0) without.push_back(fmt::format("{} ({})", m.module, m.note));
  }
  auto list = [&](const std::vector<std::string>& items) {
    std::string out;
    for (std::size_t i = 0; i < std::min(items.size(), kListed); ++i) out += (i ? ", " : "") + items[i];
    if (items.size() > kListed)
      out += fmt::format(", and {} more (csp-views --info lists them)", items.size() - kListed);
    return out;
  };
  std::vector<std::string> out;
  if (modules.empty()) return out;
  out.push_back(fmt::format("loops: {} in {} of {} modules{}", loops, with, modules.size(),
                            byAddress ? "; known by header address: " + list(addressed) : std::string()));
  if (!without.empty()) out.push_back("no loops: " + list(without));
  return out;
}

std::string unwindSummary(const storage::UnwindRecovery& r) {
  if (r.scannedSamples == 0) return {};
  return fmt::format(
      "code without unwind tables: {} samples had such frames on their call path; {} completed by "
      "binary analysis (unwind recipes), {} truncated",
      r.scannedSamples, r.recoveredSamples, r.scannedSamples - r.recoveredSamples);
}

}  // namespace csp::reduce
