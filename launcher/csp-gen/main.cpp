// csp-gen: writes measurement directories without running anything — synthetic SPMD-shaped
// workloads for tests and benchmarks, or exact profiles from a JSON description.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli_numbers.hpp"
#include "csp/storage/profile_io.hpp"
#include "csp/synth/json_spec.hpp"
#include "csp/synth/synthetic.hpp"
#include "output_dir.hpp"
#include "progress.hpp"
#include "signal_cleanup.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "csp-gen: write a CSP measurement directory of per-thread profiles without running a program.\n"
      "  synthetic:  csp-gen --ranks R --threads T --nodes N --seed S -o DIR\n"
      "  exact:      csp-gen --from-json SPEC.json -o DIR   (format: docs/csp-gen-json.md)",
      "csp-gen"};
  csp::synth::SyntheticOptions o;
  std::string out, spec;
  bool force = false, quiet = false;
  app.add_option("-o,--output", out, "measurement directory to create")->required();
  auto* fromJson = app.add_option("--from-json", spec, "write the exact profiles described by this JSON file");
  app.add_option("--ranks", o.ranks, "MPI ranks")->check(CLI::Range(1u, 1u << 24))->capture_default_str();
  app.add_option("--threads", o.threads, "threads per rank")->check(CLI::Range(1u, 1u << 16))->capture_default_str();
  app.add_option("--nodes", o.nodes, "CCT nodes of each call-path group")
      ->check(CLI::Range(4u, 1u << 26))
      ->capture_default_str();
  app.add_option("--depth", o.depth, "maximum CCT depth")->check(CLI::Range(3u, 4096u))->capture_default_str();
  app.add_option("--groups", o.groups, "distinct call-path groups (SPMD codes have a few)")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--metrics", o.metrics, "metrics: 1 = cpu-time, 2 = + real-time, more = counted events")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--imbalance", o.imbalance, "extra work of the last rank over rank 0 (0.25 = 25 %)")
      ->check(csp::cli::finiteRange(0, 100))
      ->capture_default_str();
  app.add_option("--hot-paths", o.hotPaths, "statements that carry most of the samples")->capture_default_str();
  app.add_option("--presence", o.presence, "probability that a statement occurs in a profile")
      ->check(csp::cli::finiteRange(0, 1))
      ->capture_default_str();
  app.add_option("--ranks-per-node", o.ranksPerNode, "ranks per compute node in the id tuples")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_flag("--regions", o.regions, "add a small region tree to every profile");
  app.add_option("--seed", o.seed, "random seed; the same seed gives byte-identical files")->capture_default_str();
  app.add_option("-j,--jobs", o.jobs, "writer threads (0 = all cores)")->capture_default_str();
  app.add_flag("--force", force, "replace an existing output directory");
  app.add_flag("-q,--quiet", quiet, "no progress or summary output");
  // Shape options make no sense with an exact description.
  for (const char* name : {"--ranks", "--threads", "--nodes", "--depth", "--groups", "--metrics", "--imbalance",
                           "--hot-paths", "--presence", "--ranks-per-node", "--regions", "--seed"})
    fromJson->excludes(app.get_option(name));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error of the tools.
    fmt::print(stderr, "csp-gen: {} (csp-gen --help shows the options)\n", e.what());
    return 2;
  }

  const auto start = std::chrono::steady_clock::now();
  // SIGTERM, SIGINT, SIGHUP (a time limit, Ctrl-C, a closed terminal) remove the staging
  // directory; after SIGKILL the next run for the same output removes it (StagedDirectory).
  csp::cli::installTerminationCleanup("csp-gen", true);
  try {
    csp::cli::StagedDirectory dir(out, force, csp::cli::notAMeasurementDirectory);
    csp::cli::removeOnTermination(dir.staging());
    for (const auto& l : dir.leftovers()) {
      if (!l.removed)
        fmt::print(stderr, "csp-gen: warning: earlier temporary directory {}: {}\n", l.path.string(), l.reason);
      else if (!quiet)
        fmt::print(stderr, "csp-gen: note: earlier temporary directory {}: {}\n", l.path.string(), l.reason);
    }
    csp::synth::GenerationSummary summary;
    if (!spec.empty()) {
      // Parse everything first: a bad description writes nothing.
      auto profiles = csp::synth::profilesFromJsonFile(spec);
      for (const auto& p : profiles) {
        const auto path = dir.staging() / csp::storage::profileFileName(p.identity);
        csp::storage::writeProfile(p, path);
        summary.profiles += 1;
        summary.nodes += p.cct.size();
        summary.values += p.values.size();
        summary.bytes += std::filesystem::file_size(path);
      }
    } else {
      csp::cli::Progress progress("csp-gen: writing", std::uint64_t{o.ranks} * o.threads, !quiet);
      summary = csp::synth::writeSynthetic(o, dir.staging(),
                                           [&](std::uint64_t done, std::uint64_t) { progress.update(done); });
      progress.finish();
    }
    dir.publish();
    csp::cli::removeOnTermination({});  // published: nothing temporary is left
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!quiet) {
      fmt::print("csp-gen: wrote {} profiles to {}: {} CCT nodes, {} non-zero values, {:.1f} MiB, {:.2f} s\n",
                 summary.profiles, out, summary.nodes, summary.values, summary.bytes / 1048576.0, secs);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "csp-gen: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
