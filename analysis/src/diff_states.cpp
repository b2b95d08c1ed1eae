// Waiting versus compute between two runs measured with csp-run --idleness (diff.hpp).
#include <cmath>
#include <optional>

#include "csp/analysis/diff.hpp"
#include "csp/metrics/encoding.hpp"

namespace csp::analysis {

namespace {

// The root's inclusive sum of a metric, if the run has it.
std::optional<double> rootTotal(const storage::Database& db, const std::string& name) {
  const auto& ms = db.metrics();
  for (std::size_t m = 0; m < ms.size(); ++m) {
    if (ms[m].descriptor.name != name || ms[m].valueType != storage::ValueType::Count) continue;
    for (const auto& a : db.summaries(0))
      if (a.metric == m && a.scope == storage::MetricScope::Inclusive)
        return static_cast<double>(metrics::decodeIntAccumulator(a.bytes).sum());
    return 0.0;
  }
  return std::nullopt;
}

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

}  // namespace csp::analysis
