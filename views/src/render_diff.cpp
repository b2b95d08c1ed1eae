// The csp-diff report in text (docs/diff.md "Report") and JSON.
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "csp/views/render.hpp"
#include "json.hpp"

namespace csp::views {

namespace {

// Sums can be large counts of nanoseconds: show those in seconds. `perProcess` for weak excess.
std::string amount(double v, const std::string& unit, bool perProcess = false) {
  const std::string suffix = perProcess ? "/process" : "";
  if (unit == "ns") return fmt::format("{:.4g} s{}", v / 1e9, suffix);
  if (unit.empty()) return fmt::format("{:.6g}{}", v, perProcess ? " per process" : "");
  return fmt::format("{:.6g} {}{}", v, unit, suffix);
}

std::string percent(double v) { return std::isfinite(v) ? fmt::format("{:.2f}%", v) : std::string("-"); }

std::string seconds(double ns) { return fmt::format("{:.3f} s", ns / 1e9); }
std::string signedSeconds(double ns) { return fmt::format("{:+.3f} s", ns / 1e9); }

bool strongScaling(const DiffReport& r) { return r.study.mode == metrics::ScalingMode::Strong; }

void headerText(const DiffReport& r, std::ostream& out) {
  const bool strong = strongScaling(r);
  const bool sameFrom = r.runP.processesFrom == r.runQ.processesFrom;
  out << fmt::format("csp-diff: {} scaling of {}, p = {} -> q = {} ({})\n", strong ? "strong" : "weak", r.metric,
                     r.study.p, r.study.q,
                     sameFrom ? r.runP.processesFrom : r.runP.processesFrom + " / " + r.runQ.processesFrom);
  for (const analysis::DiffRun* run : {&r.runP, &r.runQ}) {
    const double sum = run == &r.runP ? r.total.sumP : r.total.sumQ;
    const std::string counts =
        r.runCountsKnown ? fmt::format("  {} profiles, {} contexts,", run->profiles, run->nodes) : "";
    out << fmt::format("  run {}  {}{} total {}\n", run == &r.runP ? 'P' : 'Q', run->database.string(), counts,
                       amount(sum, r.unit));
    if (run->skippedInputs)
      out << fmt::format("  warning: {} profiles of this run were skipped by csp-prof-mpi; its sums miss their costs\n",
                         run->skippedInputs);
  }
  out << fmt::format("  excess {}: scaling loss {} of the q run{}\n", amount(r.total.excess, r.unit, !strong),
                     percent(r.total.loss), r.total.withinNoise ? " (within sampling error)" : "");
  out << (strong ? "  (strong: ideal is equal total cost; excess = sum q - sum p)\n"
                 : "  (weak: ideal is equal cost per process; excess = sum q/q - sum p/p)\n");
  if (!(r.total.excess > 0)) {
    out << "  the q run lost nothing overall: shares of the total loss are undefined or inverted\n";
  } else if (!r.hotPath.empty()) {
    out << fmt::format(
        "  loss hot path (each step holds at least half of the loss above it; ends at loss I {}, "
        "share {}):\n",
        percent(r.hotPathEnd.loss), percent(r.hotPathEnd.share));
    out << "    " << r.hotPathLabel << "\n";
  }
}

// A list of contexts under its title; whether a row is within sampling error.
bool listText(const DiffReport& r, const std::string& title, const std::vector<DiffRow>& rows, std::ostream& out) {
  const bool strong = strongScaling(r);
  out << "\n" << title << "\n";
  out << fmt::format("  {:>9} {:>9} {:>9} {:>18}  context\n", "loss I", "loss E", "share I", "excess I");
  bool anyNoise = false;
  for (const auto& row : rows) {
    out << fmt::format("  {:>9} {:>9} {:>9} {:>18}  {} {}\n", percent(row.inclusive.loss),
                       row.exclusive.measured ? percent(row.exclusive.loss) : std::string("-"),
                       percent(row.inclusive.share), amount(row.inclusive.excess, r.unit, !strong), row.mark,
                       row.label);
    anyNoise |= row.mark == '~';
  }
  return anyNoise;
}

void statesText(const DiffReport& r, std::ostream& out) {
  if (r.states.empty()) return;
  out << "\nWaiting and compute (csp-run --idleness; whole program, ns metrics";
  out << (strongScaling(r) ? ")\n" : ", excess per process)\n");
  out << fmt::format("  {:<11} {:>14} {:>14} {:>14}\n", "metric", "run P", "run Q", "excess");
  double waiting = 0, compute = 0;
  for (const auto& s : r.states) {
    out << fmt::format("  {:<11} {:>14} {:>14} {:>14}\n", s.metric, seconds(s.sumP), seconds(s.sumQ),
                       signedSeconds(s.excess));
    if (s.waiting) waiting += s.excess;
    if (s.metric == "work") compute = s.excess;
  }
  out << fmt::format("  compute (work) grew by {}, waiting (sync-wait + lock-wait + mpi-wait) by {}",
                     signedSeconds(compute), signedSeconds(waiting));
  out << "; csp-diff --metric NAME shows where\n";
}

nlohmann::json scopeJson(const analysis::ScopeDiff& x) {
  using detail::jsonNumber;
  return {{"sum_p", x.sumP},
          {"sum_q", x.sumQ},
          {"excess", x.excess},
          {"loss", jsonNumber(x.loss)},
          {"share", jsonNumber(x.share)},
          {"noise", x.noise},
          {"within_noise", x.withinNoise},
          {"measured", x.measured}};
}

nlohmann::json rowsJson(const std::vector<DiffRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& row : rows)
    a.push_back({{"node", row.node},
                 {"label", row.label},
                 {"mark", std::string(1, row.mark)},
                 {"inclusive", scopeJson(row.inclusive)},
                 {"exclusive", scopeJson(row.exclusive)}});
  return a;
}

nlohmann::json runJson(const DiffReport& r, const analysis::DiffRun& run) {
  nlohmann::json j{{"database", run.database.string()},
                   {"title", run.title},
                   {"processes", run.processes},
                   {"processes_from", run.processesFrom}};
  if (r.runCountsKnown) {
    j["profiles"] = run.profiles;
    j["contexts"] = run.nodes;
    j["skipped_inputs"] = run.skippedInputs;
  }
  return j;
}

}  // namespace

void renderDiffText(const DiffReport& r, std::ostream& out) {
  headerText(r, out);
  bool anyNoise = listText(
      r, fmt::format("Top {} contexts by inclusive loss (loss I >> loss E: look at the callees)", r.losses.size()),
      r.losses, out);
  if (!r.gains.empty()) anyNoise |= listText(r, "Largest gains (negative loss)", r.gains, out);
  if (r.onlyP + r.onlyQ == 0) {
    out << "\nEvery context occurs in both runs.\n";
  } else {
    listText(r,
             fmt::format("Contexts in one run only: {} only in run Q (+), {} only in run P (-); outermost {} of {}:",
                         r.onlyQ, r.onlyP, r.oneRunOnly.size(), r.oneRunOnlyCount),
             r.oneRunOnly, out);
  }
  out << fmt::format(
      "\nloss: % of the q run's {}total {}; share: % of the total loss (over 100 % where other contexts "
      "gained)\n",
      strongScaling(r) ? "" : "per-process ", r.metric);
  if (anyNoise || !r.exact)
    out << "~: within sampling error (|excess| <= the worst-case error of thesis Eq. A.10): may be noise\n";
  else
    out << fmt::format("{} is exact in both runs (counted, or period 1): no sampling error\n", r.metric);
  statesText(r, out);
}

void renderDiffJson(const DiffReport& r, std::ostream& out) {
  using Json = nlohmann::json;
  Json states = Json::array();
  for (const auto& s : r.states)
    states.push_back(
        {{"metric", s.metric}, {"waiting", s.waiting}, {"sum_p", s.sumP}, {"sum_q", s.sumQ}, {"excess", s.excess}});
  const Json study{{"mode", strongScaling(r) ? "strong" : "weak"},
                   {"metric", r.metric},
                   {"unit", r.unit},
                   {"p", r.study.p},
                   {"q", r.study.q},
                   {"exact", r.exact}};
  const Json hotPath{{"nodes", r.hotPath}, {"label", r.hotPathLabel}, {"end", scopeJson(r.hotPathEnd)}};
  const Json contexts{{"losses", rowsJson(r.losses)},
                      {"gains", rowsJson(r.gains)},
                      {"one_run_only", {{"rows", rowsJson(r.oneRunOnly)}, {"count", r.oneRunOnlyCount}}},
                      {"only_p", r.onlyP},
                      {"only_q", r.onlyQ}};
  const Json j{{"study", study},
               {"runs", {{"p", runJson(r, r.runP)}, {"q", runJson(r, r.runQ)}}},
               {"total", scopeJson(r.total)},
               {"hot_path", hotPath},
               {"contexts", contexts},
               {"states", std::move(states)}};
  out << detail::dumpJson(j, 1) << "\n";
}

}  // namespace csp::views
