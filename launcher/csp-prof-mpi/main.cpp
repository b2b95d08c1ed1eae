// csp-prof-mpi: parallel post-processing of per-thread profiles into a CSP database.
//   [srun|mpirun -np P] csp-prof-mpi [options] MEASUREMENT_DIR... -o DB
#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <optional>
#include <thread>

#include "cli_numbers.hpp"
#include "cli_parse.hpp"
#include "csp/reduce/hpctoolkit_export.hpp"
#include "csp/reduce/overhead.hpp"
#include "csp/reduce/prof.hpp"
#include "progress.hpp"
#include "signal_cleanup.hpp"

namespace {

// Progress on rank 0: the launcher's Progress for each phase.
class PhaseProgress : public csp::reduce::ProgressSink {
 public:
  explicit PhaseProgress(bool enabled) : enabled_(enabled) {}
  void begin(const std::string& phase, std::uint64_t total) override {
    current_.emplace("csp-prof-mpi: " + phase, total, enabled_);
  }
  void update(std::uint64_t done) override {
    if (current_) current_->update(done);
  }
  void end() override {
    if (current_) current_->finish();
    current_.reset();
  }

 private:
  bool enabled_;
  std::optional<csp::cli::Progress> current_;
};
// The command line: what the options fill in.
struct CommandLine {
  csp::reduce::ProfOptions o;
  csp::reduce::DatabaseSinkOptions database;
  std::vector<std::string> inputs, replace, classRules;
  std::string output, hpctoolkit;
  bool quiet = false, noLoops = false;
  CLI::Option* hpctoolkitOption = nullptr;
};

void defineOptions(CLI::App& app, CommandLine& c) {
  app.add_option(
         "inputs", c.inputs,
         "measurement directories (or individual .cspprof files, one-record .cspbundle files, and .hpcrun files "
         "of HPCToolkit)")
      ->required();
  app.add_option("-o,--output", c.output, "database directory to create")->required();
  app.add_flag("--force", c.database.force,
               "replace an existing database (and an existing HPCToolkit database, with --hpctoolkit)");
  c.hpctoolkitOption = app.add_option(
      "--hpctoolkit", c.hpctoolkit,
      "DIR: also write the result as an HPCToolkit database (meta.db, profile.db, cct.db) for hpcviewer and "
      "Hatchet, in parallel, once the CSP database is published (docs/hpctoolkit.md)");
  app.add_option("-j,--jobs", c.o.pipeline.jobs, "worker threads per process (0 = all cores of the allocation)")
      ->capture_default_str();
  app.add_flag("--skip-invalid", c.o.pipeline.skipInvalid,
               "skip unreadable profiles (they are listed in the database and the summary) instead of failing");
  app.add_flag("--no-balance{false}", c.o.pipeline.balanceRead,
               "each process reads exactly its static share of the profiles, instead of neighbouring processes on "
               "one host taking over batches from each other while they read (docs/postprocessing.md, Balancing)");
  app.add_flag("--physical", c.o.pipeline.physical,
               "OpenMP: keep the native call paths of worker threads (below the runtime's thread start) instead "
               "of placing each parallel region's and task's samples below the context that created it");
  app.add_option("--replace-path", c.replace,
                 "OLD=NEW: look up load modules whose path starts with OLD under NEW (moved binaries); repeatable")
      ->allow_extra_args(false);
  app.add_flag("--no-loops", c.noLoops,
               "no loop recovery: no binary analysis of the modules, no Loop scopes (see docs/postprocessing.md)");
  app.add_option("--structure-cache", c.o.pipeline.attribution.structureCache,
                 "DIR: where the modules' recovered structure (loops, function bounds) is cached per build-id, or "
                 "'off'; default $CSP_STRUCTURE_CACHE, else $XDG_CACHE_HOME/csp/structure or ~/.cache/csp/structure");
  app.add_option("--batch", c.o.pipeline.batchProfiles,
                 "profiles per metrics batch (memory per process grows with it); 0: automatic, at most 256 and fewer "
                 "for large profiles, so that a batch holds about 64 MiB of input")
      ->check(CLI::Range(0u, 65536u))
      ->capture_default_str();
  app.add_option_function<std::uint64_t>(
         "--batch-budget", [&c](std::uint64_t mib) { c.o.pipeline.batchBudget = mib << 20; },
         "MiB of input an automatic batch holds at most (at least one profile; default 64): per-thread values take "
         "one to three times their input, and two batches are in flight")
      ->check(CLI::Range(1u, 1048576u));
  app.add_option("--title", c.database.title, "description stored in the database");
  app.add_option("--derive", c.o.pipeline.derive,
                 "'NAME = EXPR': a metric computed per thread, per node and scope from raw metrics before "
                 "aggregation (quote names with '-' as `cpu-time`); repeatable. See docs/metrics.md")
      ->allow_extra_args(false);
  app.add_option("--overhead-rule", c.o.pipeline.overheadRules,
                 "MODULE_GLOB[:PROCEDURE_GLOB]: samples of 'work' (csp-run --idleness) in such code are parallel "
                 "overhead; repeatable; replaces the default rules ('default' adds them back, 'none' alone: no rule). "
                 "See docs/postprocessing.md")
      ->allow_extra_args(false);
  app.add_flag("-q,--quiet", c.quiet, "no progress output (errors only)");
  app.add_option("--thread-class", c.classRules,
                 "CLASS=PATTERN: threads whose entry procedure or its module's file name matches the glob are in "
                 "CLASS (main, worker, helper); repeatable, tried in order before the built-in rules");
  app.add_option("--helper-fraction", c.o.pipeline.threadClasses.helperFraction,
                 "a thread other than the first with less work than this share of its process's busiest thread is a "
                 "helper (0: never by work)")
      ->check(csp::cli::finiteRange(0, 1))
      ->capture_default_str();
}

// What the parser cannot check; empty when all is well, else the message.
std::string checkOptions(CommandLine& c) {
  for (const auto& r : c.replace) {
    auto eq = r.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fmt::format("--replace-path '{}': expected OLD=NEW", r);
    }
    c.o.pipeline.attribution.replacePaths.emplace_back(r.substr(0, eq), r.substr(eq + 1));
  }
  for (const auto& rule : c.classRules) {
    try {
      c.o.pipeline.threadClasses.rules.push_back(csp::reduce::parseThreadClassRule(rule));
    } catch (const std::invalid_argument& e) {
      return fmt::format("--thread-class {}", e.what());
    }
  }
  try {
    (void)csp::reduce::OverheadRules::parse(c.o.pipeline.overheadRules);
  } catch (const std::invalid_argument& e) {
    return fmt::format("--overhead-rule: {}", e.what());
  }
  if (c.hpctoolkitOption->count() > 0) {  // before the reduction, not after it
    auto why = csp::reduce::hpctoolkitOutputProblem(c.hpctoolkit, c.database.force);
    if (why.empty() && std::filesystem::weakly_canonical(c.hpctoolkit) == std::filesystem::weakly_canonical(c.output))
      why = "--hpctoolkit " + c.hpctoolkit + ": the same directory as the CSP database";
    if (!why.empty()) return why;
  }
  return {};
}

// Rank 0's summary of a finished run.
void printSummary(const csp::reduce::ProfSummary& s, const CommandLine& c,
                  const std::optional<csp::reduce::HpctoolkitExportSummary>& h, int size, double secs) {
  fmt::print("csp-prof-mpi: wrote {}\n", c.output);
  fmt::print("  post-processing ranks {}, profiles read {} of {}, skipped {}, batches of {} profiles\n", size,
             s.profiles, s.inputs, s.skipped.size(), s.batchProfiles);
  for (const auto& k : s.skipped) fmt::print("    skipped {}: {}\n", k.path, k.reason);
  if (size > 1)
    fmt::print("  profiles per rank {} to {}{}\n", s.profilesPerRank.first, s.profilesPerRank.second,
               c.o.pipeline.balanceRead ? " (balanced in the read between ranks on one host)" : " (static shares)");
  fmt::print("  canonical CCT {} nodes, {} metrics, {} regions\n", s.cctNodes, s.metrics,
             s.regions > 0 ? s.regions - 1 : 0);
  fmt::print(
      "  per-thread values {} (each stored by profile and by node), database {:.1f} MiB ({:.2f} bytes per value)\n",
      s.valuesWritten, s.databaseBytes / 1048576.0,
      s.valuesWritten ? double(s.databaseBytes) / double(s.valuesWritten) : 0.0);
  const auto& a = s.attribution;
  if (a.lookups)
    fmt::print(
        "  attribution: {} addresses, {} with source lines, {} by symbol only, {} by unwind information, {} by "
        "function bounds, {} unknown\n",
        a.lookups, a.withLines, a.symbolOnly, a.byUnwindInfo, a.byFunctionBounds, a.unknown);
  if (a.modulesAnalysed + a.modulesFromCache > 0)
    fmt::print("  structure: {} modules, {} analysed in {:.2f} s, {} from the cache {}; {} loops\n",
               a.modulesAnalysed + a.modulesFromCache, a.modulesAnalysed, a.analysisSeconds, a.modulesFromCache,
               a.structureCache.empty() ? std::string("(none)") : a.structureCache, a.loops);
  const auto& q = s.quality;
  auto share = [&](std::uint64_t n) { return q.samples ? 100.0 * double(n) / double(q.samples) : 0.0; };
  fmt::print("  samples {}: {} truncated paths ({:.1f} %), {} unwind failures, {} dropped ({:.1f} %)\n", q.samples,
             q.truncatedSamples, share(q.truncatedSamples), q.unwindFailures, q.droppedSamples,
             share(q.droppedSamples));
  if (const auto u = csp::reduce::unwindSummary(s.unwindRecovery); !u.empty()) fmt::print("  {}\n", u);
  for (const auto& line : csp::reduce::loopSummary(s.moduleLoops)) fmt::print("  {}\n", line);
  if (!s.droppedByCause.empty()) fmt::print("    dropped by cause: {}\n", s.droppedByCause);
  for (const auto& w : csp::reduce::qualityWarnings(q)) fmt::print("  warning: {}\n", w);
  for (const auto& w : s.measurementWarnings) fmt::print("  warning: {}\n", w);
  for (const auto& w : s.attribution.warnings) fmt::print("  warning: {}\n", w);
  for (const auto& i : c.inputs)
    if (const auto n = csp::reduce::hpcrunNotRead(i); !n.empty()) fmt::print("  note: {}\n", n);
  if (const unsigned jobs = c.o.pipeline.jobs; jobs > s.workerThreads)
    fmt::print(
        "  note: -j {} is more than the {} CPU(s) rank 0 may run on (its CPU binding), so it used {} thread(s); to "
        "use more, bind each rank to more CPUs (mpirun --map-by slot:PE=N, srun --cpus-per-task=N) or to none "
        "(mpirun --bind-to none)\n",
        jobs, s.workerThreads, s.workerThreads);
  std::string phases;
  for (const auto& p : s.phases) phases += fmt::format(" {} {:.2f}s,", p.phase, p.seconds);
  if (!phases.empty()) phases.pop_back();
  if (h)
    fmt::print("  HPCToolkit database {}: {} profiles, {} contexts, {:.1f} MiB ({:.2f} bytes per value), {:.2f} s\n",
               c.hpctoolkit, h->profiles, h->contexts, h->bytes / 1048576.0,
               h->values ? double(h->bytes) / double(h->values) : 0.0, h->seconds);
  fmt::print("  time {:.2f} s:{}\n", secs, phases);
  if (!s.slowest.empty() && s.slowest.size() <= s.phases.size()) {
    std::string slowest;
    for (std::size_t i = 0; i < s.slowest.size(); ++i)
      slowest += fmt::format(" {} {:.2f}s (rank {}),", s.phases[i].phase, s.slowest[i].seconds, s.slowest[i].rank);
    slowest.pop_back();
    fmt::print("  slowest rank per phase:{}\n", slowest);
  }
}

// glibc's allocator hands memory back to the system whenever more than its trim threshold is
// free at the top of a heap, and adapts that threshold to the largest mmap()ed block freed so
// far: whether a process then faults in fresh pages for every profile it reads (input buffer,
// decoded tables, projection) depends on what it happened to free first. Measured at 4,096
// profiles, -np 2: one rank 130,000 page faults, the other 38,000, and the first finished
// reading 0.15-0.3 s later, which every rank then waited for. Fixed thresholds give each rank
// about 30,000: memory freed after a profile stays with the process for the next (until more
// than 64 MiB lie free at a heap's top), and blocks from 4 MiB up (tables made once) still come
// from mmap().
void keepFreedMemoryForTheNextProfile() {
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  keepFreedMemoryForTheNextProfile();
  const csp::reduce::MpiSession mpi(argc, argv);  // ends MPI however main returns
  const int rank = mpi.rank(), size = mpi.size();

  CLI::App app{
      "csp-prof-mpi: reduce per-thread profiles into a CSP database (canonical CCT, summary statistics, "
      "per-thread values). Run it under srun or mpirun for parallel post-processing; without a launcher it "
      "runs as one process.",
      "csp-prof-mpi"};
  CommandLine c;
  defineOptions(app, c);
  // Rank 0 says what is wrong; every rank leaves with the same status.
  std::ostringstream silent;
  if (const auto exit = rank == 0 ? csp::cli::parseOrExit(app, "csp-prof-mpi", [&] { app.parse(argc, argv); })
                                  : csp::cli::parseOrExit(
                                        app, "csp-prof-mpi", [&] { app.parse(argc, argv); }, silent, silent))
    return *exit;
  if (const auto why = checkOptions(c); !why.empty()) {
    if (rank == 0) fmt::print(stderr, "csp-prof-mpi: error: {}\n", why);
    return 2;
  }
  auto& o = c.o;
  auto& database = c.database;
  const auto& inputs = c.inputs;
  const auto& output = c.output;
  const auto& hpctoolkit = c.hpctoolkit;
  const bool quiet = c.quiet;
  o.pipeline.attribution.loops = !c.noLoops;
  // The input formats csp-prof-mpi reads (docs/layout.md, "Extending": a new one is added here).
  o.pipeline.sources = {csp::reduce::cspProfileSource(), csp::reduce::memoryProfileSource(),
                        csp::reduce::hpcrunProfileSource()};
  for (const auto& i : inputs) {
    o.pipeline.inputs.emplace_back(i);
    // An hpcrun measurement's structure files, for the modules whose binaries are gone.
    for (auto& f : csp::reduce::hpcstructFiles(i)) o.pipeline.attribution.hpcstructFiles.push_back(std::move(f));
  }
  database.output = output;
  // Termination signals and a vanished launcher remove the temporary directory (every rank).
  csp::cli::installTerminationCleanup("csp-prof-mpi", rank == 0);
  database.onTempDir = [](const std::filesystem::path& dir, int ownerPid) {
    csp::cli::removeOnTermination(dir, ownerPid == ::getpid() ? 0 : ownerPid);
  };
  database.onLeftover = [quiet](bool removed, const std::string& text) {
    if (!removed)
      fmt::print(stderr, "csp-prof-mpi: warning: earlier temporary directory {}\n", text);
    else if (!quiet)
      fmt::print(stderr, "csp-prof-mpi: note: earlier temporary directory {}\n", text);
  };
  // The outputs (docs/layout.md, "Extending": a new format is added here).
  o.sinks = {csp::reduce::cspDatabaseSink(database)};
  std::optional<csp::reduce::HpctoolkitExportSummary> h;
  if (c.hpctoolkitOption->count() > 0)  // after the database sink: it exports the database that one published
    o.sinks.push_back(
        csp::reduce::hpctoolkitSink({{output, hpctoolkit, database.force, database.onLeftover, database.onTempDir},
                                     [&h](const csp::reduce::HpctoolkitExportSummary& summary) { h = summary; }}));
  std::optional<csp::cli::OrphanWatchdog> watchdog;
  if (size > 1) watchdog.emplace("csp-prof-mpi");

  const auto start = std::chrono::steady_clock::now();
  PhaseProgress progress(!quiet);
  int status = 0;
  try {
    csp::reduce::Comm comm(mpi.world());
    const auto s = csp::reduce::runProf(comm, o, &progress);
    csp::cli::removeOnTermination({});  // published: nothing temporary is left
    if (rank == 0 && quiet)             // what is missing from the measurement is said even then
      for (const auto& w : s.measurementWarnings) fmt::print(stderr, "csp-prof-mpi: warning: {}\n", w);
    if (rank == 0 && !quiet) {
      printSummary(s, c, h, size, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  } catch (const std::exception& e) {
    if (rank == 0) fmt::print(stderr, "csp-prof-mpi: error: {}\n", e.what());
    status = 1;
  }
  watchdog.reset();
  return status;
}
