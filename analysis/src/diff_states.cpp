// Waiting versus compute between two runs measured with csp-run --idleness (diff.hpp).
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "csp/analysis/diff.hpp"
#include "csp/metrics/encoding.hpp"

namespace csp::analysis {

namespace {

// The root's inclusive sum of a metric, if the run has it.
std::optional<double> rootTotal(const storage::Database& db, const std::string& name) {
  const auto& ms = db.metrics();
  for (storage::MetricId m = 0; m < ms.size(); ++m) {
    if (ms[m].descriptor.name != name || ms[m].valueType != storage::ValueType::Count) continue;
    for (const auto& a : db.summaries(0))
      if (a.metric == m && a.scope == storage::MetricScope::Inclusive)
        return static_cast<double>(metrics::decodeIntAccumulator(a.bytes).sum());
    return 0.0;
  }
  return std::nullopt;
}

std::string seconds(double ns) { return fmt::format("{:.3f} s", ns / 1e9); }
std::string signedSeconds(double ns) { return fmt::format("{:+.3f} s", ns / 1e9); }

}  // namespace

std::vector<StateExcess> stateExcess(const storage::Database& runP, const storage::Database& runQ,
                                     const ScalingDiff& diff) {
  std::vector<StateExcess> out;
  if (!rootTotal(runP, "work") || !rootTotal(runQ, "work")) return out;
  for (const char* name : {"work", "idleness", "sync-wait", "lock-wait", "lock-blame", "mpi-wait"}) {
    const auto p = rootTotal(runP, name), q = rootTotal(runQ, name);
    if (!p || !q) continue;
    StateExcess s;
    s.metric = name;
    s.waiting = s.metric == "sync-wait" || s.metric == "lock-wait" || s.metric == "mpi-wait";
    s.sumP = *p;
    s.sumQ = *q;
    s.excess = metrics::scalingExcess(diff.study, s.sumP, s.sumQ);
    out.push_back(std::move(s));
  }
  return out;
}

std::string formatStateExcess(const std::vector<StateExcess>& states, const ScalingDiff& diff) {
  if (states.empty()) return "";
  const bool strong = diff.study.mode == metrics::ScalingMode::Strong;
  std::string out = "\nWaiting and compute (csp-run --idleness; whole program, ns metrics";
  out += strong ? ")\n" : ", excess per process)\n";
  out += fmt::format("  {:<11} {:>14} {:>14} {:>14}\n", "metric", "run P", "run Q", "excess");
  double waiting = 0, compute = 0;
  for (const auto& s : states) {
    out += fmt::format("  {:<11} {:>14} {:>14} {:>14}\n", s.metric, seconds(s.sumP), seconds(s.sumQ),
                       signedSeconds(s.excess));
    if (s.waiting) waiting += s.excess;
    if (s.metric == "work") compute = s.excess;
  }
  out += fmt::format("  compute (work) grew by {}, waiting (sync-wait + lock-wait + mpi-wait) by {}", signedSeconds(compute),
                     signedSeconds(waiting));
  out += "; csp-diff --metric NAME shows where\n";
  return out;
}

}  // namespace csp::analysis
