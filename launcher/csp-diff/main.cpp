// csp-diff: where scaling is lost between a run on p and a run on q > p processes.
//   csp-diff [--strong|--weak] [--p N --q M] [--metric NAME] RUN_P RUN_Q [-o OUT_DB [--force]] [--top K]
// Argument parsing only: the analysis lives in analysis/, the report and its renderers in views/.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "cli_numbers.hpp"
#include "csp/analysis/diff.hpp"
#include "csp/views/render.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "csp-diff: where scaling is lost between two runs of the same program (docs/diff.md).\n"
      "  csp-diff run-p64 run-p4096 [-o scaling-db]\n"
      "Each run is a CSP database or a run directory holding db/; RUN_P is the smaller run.",
      "csp-diff"};
  std::string runP, runQ, output, format = "text";
  bool strong = false, weak = false, force = false, quiet = false;
  double p = 0, q = 0;
  std::size_t top = 10;
  csp::analysis::DiffOptions o;
  app.add_option("RUN_P", runP, "the run on p processes (database or run directory)")->required();
  app.add_option("RUN_Q", runQ, "the run on q > p processes")->required();
  auto* strongFlag = app.add_flag("--strong", strong, "strong scaling, same total problem (the default)");
  app.add_flag("--weak", weak, "weak scaling, same problem per process")->excludes(strongFlag);
  auto* pOption = app.add_option("--p", p, "process count of RUN_P (default: its distinct MPI ranks, else processes)")
                      ->check(csp::cli::positiveFinite());
  auto* qOption =
      app.add_option("--q", q, "process count of RUN_Q (default: as for --p)")->check(csp::cli::positiveFinite());
  app.add_option("--metric", o.metric,
                 "metric to compare (default: cpu-time, else real-time, else the first in common)");
  app.add_option("-o,--output", output, "write the result as a CSP database to this directory");
  app.add_flag("--force", force, "replace an existing output database");
  app.add_option("--top", top, "contexts to list in each part of the report")->capture_default_str();
  app.add_option("--format", format, "the report as text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "no report (errors only)");
  CLI11_PARSE(app, argc, argv);
  o.mode = weak ? csp::metrics::ScalingMode::Weak : csp::metrics::ScalingMode::Strong;
  if (*pOption) o.p = p;
  if (*qOption) o.q = q;
  const bool json = format == "json";

  try {
    const auto pathP = csp::analysis::resolveRunDatabase(runP);
    const auto pathQ = csp::analysis::resolveRunDatabase(runQ);
    if (!output.empty()) csp::analysis::checkDiffOutput(output, {{runP, pathP}, {runQ, pathQ}});
    const auto dbP = csp::storage::Database::open(pathP);
    const auto dbQ = csp::storage::Database::open(pathQ);
    const auto diff = csp::analysis::computeScalingDiff(*dbP, *dbQ, o);
    // Written before the report so that a refused output does not look like success.
    if (!output.empty()) csp::analysis::writeDiffDatabase(diff, output, force);
    if (!quiet) {
      const auto report = csp::views::diffReport(diff, top, csp::analysis::stateExcess(*dbP, *dbQ, diff));
      csp::views::render(report, json ? csp::views::Format::Json : csp::views::Format::Text, std::cout);
      std::cout.flush();
      // With JSON on stdout, what was written is said on stderr.
      if (!output.empty())
        (json ? std::cerr : std::cout) << fmt::format("{}csp-diff: wrote {}\n", json ? "" : "\n", output);
    }
  } catch (const std::exception& e) {
    std::cout.flush();
    fmt::print(stderr, "csp-diff: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
