// Thesis Fig. 5.1 (§5.2.3): how idleness and overhead of a context read together.
#include <cmath>

#include <fmt/format.h>

#include "csp/views/views.hpp"

namespace csp::views {

std::string effortNote(double work, double idleness, double overhead, double highIdlenessPercent,
                       double highOverheadPercent) {
  const double effort = work + idleness;
  if (!(effort > 0)) return "";
  const bool highIdleness = 100.0 * idleness >= highIdlenessPercent * effort;
  const bool highOverhead = work > 0 && 100.0 * overhead >= highOverheadPercent * work;
  if (highIdleness && highOverhead) return "change the parallelization";
  if (highIdleness) return "refine granularity";
  if (highOverhead) return "coarsen granularity";
  return "effectively parallel";
}

void interpretEffort(ViewTree& tree, double highIdlenessPercent, double highOverheadPercent, bool idlenessMeasured) {
  if (tree.kind == ViewKind::Regions)
    throw ViewError("--effort applies to the calling context, callers and flat views");
  auto column = [&](const char* metric) -> std::ptrdiff_t {
    for (std::size_t c = 0; c < tree.columns.size(); ++c)
      if (tree.columns[c].formula.empty() && tree.columns[c].metric == metric &&
          tree.columns[c].scope == storage::MetricScope::Inclusive)
        return static_cast<std::ptrdiff_t>(c);
    return -1;
  };
  const auto work = column("work"), idleness = column("idleness"), overhead = column("overhead");
  if (work < 0 || idleness < 0)
    throw ViewError(
        "--effort needs inclusive columns of the metrics work and idleness (measure with csp-run --idleness)");
  for (auto& n : tree.nodes) {
    // Call sites repeat their callee and statements their scope: notes go to the scopes where a
    // granularity can be chosen.
    if (n.kind == NodeKind::CallSite || n.kind == NodeKind::Statement) continue;
    auto sum = [&](std::ptrdiff_t c) {
      if (c < 0 || static_cast<std::size_t>(c) >= n.stats.size()) return 0.0;
      const double s = n.stats[static_cast<std::size_t>(c)].sum;
      return std::isnan(s) ? 0.0 : s;
    };
    n.note = effortNote(sum(work), sum(idleness), sum(overhead), highIdlenessPercent, highOverheadPercent);
    // Without the idleness every reading would be a guess (a libgomp loop with 75 % imbalance read
    // "effectively parallel").
    if (!idlenessMeasured && !n.note.empty()) n.note = "idleness not measured";
  }
  tree.hasNotes = true;
}

}  // namespace csp::views
