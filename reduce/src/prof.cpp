// csp-prof-mpi as a library call: the pipeline (pipeline.hpp), then the sinks of prof.hpp, and the
// one failure path of mpi_comm.hpp around all of them.
#include "csp/reduce/prof.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace csp::reduce {

namespace {

// Every rank's phase times so far and its profile count to the root, which keeps per phase the
// slowest rank (the first of equals) and the fewest and most profiles of a rank. Every rank runs
// the same phases; a rank whose list differs is left out of the phases. Taken before the outputs
// are published, so that a failure here is the job's like any other, not one after its database
// became visible.
void gatherRankFigures(const Comm& comm, const std::vector<PhaseTime>& phases, std::uint32_t profiles,
                       ProfSummary& summary) {
  if (comm.size() == 1) return;
  Packer p;
  p.u64(profiles);
  p.u64(phases.size());
  for (const auto& t : phases) p.real(t.seconds);
  const auto parts = comm.gather(p.take());
  if (comm.rank() != 0) return;
  auto& slowest = summary.slowest;
  slowest.assign(phases.size(), {});
  summary.profilesPerRank = {UINT32_MAX, 0};
  for (int r = 0; r < static_cast<int>(parts.size()); ++r) {
    Unpacker u(parts[static_cast<std::size_t>(r)], "phase times");
    const auto n = static_cast<std::uint32_t>(u.u64());
    summary.profilesPerRank = {std::min(summary.profilesPerRank.first, n), std::max(summary.profilesPerRank.second, n)};
    if (u.u64() != phases.size()) continue;
    for (auto& s : slowest) {
      const double seconds = u.real();
      if (r == 0 || seconds > s.seconds) s = {r, seconds};
    }
  }
}

// The stages on this rank. Any exception ends them here; runProf turns it into the job-wide
// failure. The sinks live in the caller so that their temporary files are removed only once
// every rank has stopped writing into them.
ProfSummary runStages(const Comm& comm, const ProfOptions& options, ProgressSink* progress) {
  ProfSummary summary;
  Pipeline pipeline(comm, options.pipeline, progress);
  for (const auto& sink : options.sinks) sink->open(comm);

  pipeline.discover();
  pipeline.buildStructure();
  for (const auto& sink : options.sinks) sink->begin(comm, pipeline);
  pipeline.computeMetrics([&](std::size_t batchIndex, std::span<const ProfileInfo> batch,
                              std::vector<ThreadValues>& values, std::vector<RegionValues>& regionValues) {
    for (const auto& sink : options.sinks) sink->write(batchIndex, batch, values, regionValues);
    values.clear();
  });
  summary.phases = pipeline.phaseTimes();
  for (const auto& sink : options.sinks) sink->finish(comm, pipeline, summary);
  gatherRankFigures(comm, summary.phases, pipeline.localProfileCount(), summary);  // the phases up to publication
  for (const auto& sink : options.sinks) sink->publish(comm, summary);

  summary.inputs = pipeline.inputCount();
  summary.profiles = pipeline.profileCount();
  summary.batchProfiles = pipeline.batchProfiles();
  summary.skipped = pipeline.skipped();
  summary.cctNodes = static_cast<std::uint32_t>(pipeline.cct().size());
  summary.metrics = pipeline.metrics().size();
  summary.regions = static_cast<std::uint32_t>(pipeline.regions().size());
  summary.attribution = pipeline.attributionStats();
  summary.workerThreads = pipeline.workerThreads();
  return summary;
}

}  // namespace

ProfSummary runProf(const Comm& comm, const ProfOptions& options, ProgressSink* progress) {
  try {
    if (options.sinks.empty()) throw PipelineError("no outputs (sinks) given");
    return runStages(comm, options, progress);
  } catch (...) {
    const std::string message = failureMessageOfCurrentException();
    for (const auto& sink : options.sinks) sink->stop();
    const auto failures = comm.fail(message);
    for (const auto& sink : options.sinks) sink->abandon();  // every rank has stopped writing
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
