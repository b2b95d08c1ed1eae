// The csp-diff terminal report (docs/diff.md "Report").
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "csp/analysis/diff.hpp"

namespace csp::analysis {

namespace {

// Keeps the tail of long paths: the innermost frames are the ones to act on.
constexpr std::size_t kMaxLabel = 110;

// Labels show file base names: full paths are in the database, and a path of paths is unreadable.
std::string segment(const DiffNode& n) {
  switch (n.kind) {
    case ScopeKind::Root: return "<program root>";
    case ScopeKind::ProcFrame: return n.name.empty() ? "<unknown procedure>" : n.name;
    case ScopeKind::Alien: return "inlined " + n.name;
    // Code without a line table: loops by header address, statements and calls by offset.
    case ScopeKind::Loop: return n.name.empty() ? fmt::format("loop {}:{}", baseName(n.file), n.line) : n.name;
    case ScopeKind::CallSite:
    case ScopeKind::Stmt:
      if (!n.name.empty()) return n.name;
      return n.file.empty() ? std::string() : fmt::format("{}:{}", baseName(n.file), n.line);
  }
  return "?";
}

// Sums can be large counts of nanoseconds: show those in seconds. `perProcess` for weak excess.
std::string amount(double v, const std::string& unit, bool perProcess = false) {
  const std::string suffix = perProcess ? "/process" : "";
  if (unit == "ns") return fmt::format("{:.4g} s{}", v / 1e9, suffix);
  if (unit.empty()) return fmt::format("{:.6g}{}", v, perProcess ? " per process" : "");
  return fmt::format("{:.6g} {}{}", v, unit, suffix);
}

std::string percent(double v) { return std::isfinite(v) ? fmt::format("{:.2f}%", v) : std::string("-"); }

char mark(const DiffNode& n) {
  if (n.presence == Presence::OnlyQ) return '+';
  if (n.presence == Presence::OnlyP) return '-';
  return n.inclusive.withinNoise ? '~' : ' ';
}

// Contexts worth listing: CallSite nodes repeat their callees' values and the root is the total.
bool listable(const DiffNode& n) {
  return n.kind != ScopeKind::Root && n.kind != ScopeKind::CallSite && n.inclusive.measured;
}

// Pass-through contexts (_start, wrappers, a procedure whose only cost is one statement) have a
// child with the same inclusive sums in both runs (costs are non-negative, so they have nothing
// else): the child's path names them, so listing both would only repeat a row. A frame whose
// only child is a call site is caught at the call site's level.
std::vector<bool> passThrough(const ScalingDiff& d) {
  std::vector<bool> out(d.nodes.size(), false);
  for (storage::NodeId i = 1; i < d.nodes.size(); ++i) {
    const auto& child = d.nodes[i].inclusive;
    const auto& parent = d.nodes[d.nodes[i].parent].inclusive;
    if (child.sumP == parent.sumP && child.sumQ == parent.sumQ) out[d.nodes[i].parent] = true;
  }
  return out;
}

// The loss hot path: from the root, step into the child (through call sites) that holds at
// least half of the current context's inclusive excess, as long as there is one. Its end is where
// the loss concentrates; the procedures on the way say how the program got there.
std::vector<storage::NodeId> hotPath(const ScalingDiff& d) {
  std::vector<std::vector<storage::NodeId>> children(d.nodes.size());
  for (storage::NodeId i = 1; i < d.nodes.size(); ++i) children[d.nodes[i].parent].push_back(i);
  std::vector<storage::NodeId> path;
  storage::NodeId at = 0;
  while (d.nodes[at].inclusive.excess > 0) {
    storage::NodeId best = kNoIndex;
    for (auto c : children[at])
      if (best == kNoIndex || d.nodes[c].inclusive.excess > d.nodes[best].inclusive.excess) best = c;
    if (best == kNoIndex || !(d.nodes[best].inclusive.excess >= 0.5 * d.nodes[at].inclusive.excess)) break;
    at = best;
    path.push_back(at);
  }
  return path;
}

// Procedure-level rendering of a path: frames, inlined code and loops; lines only at the end.
std::string pathLabel(const ScalingDiff& d, const std::vector<storage::NodeId>& path) {
  std::string out;
  for (std::size_t k = 0; k < path.size(); ++k) {
    const DiffNode& n = d.nodes[path[k]];
    const bool last = k + 1 == path.size();
    if (!last && (n.kind == ScopeKind::CallSite || n.kind == ScopeKind::Stmt)) continue;
    const auto part = segment(n);
    if (!part.empty()) out += (out.empty() ? "" : " > ") + part;
  }
  return out;
}

}  // namespace

std::string contextLabel(const ScalingDiff& diff, storage::NodeId node) {
  if (node == 0) return segment(diff.nodes[0]);
  std::vector<std::string> parts;
  // A call site without line information is just an edge: it says nothing.
  for (storage::NodeId at = node; at != 0 && at != kNoIndex; at = diff.nodes[at].parent) {
    auto part = segment(diff.nodes[at]);
    if (!part.empty()) parts.push_back(std::move(part));
    else if (diff.nodes[at].kind == ScopeKind::Stmt) parts.emplace_back("<unknown line>");
  }
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : " > ") + *it;
  if (out.size() > kMaxLabel) {
    // Cut at a separator so that no frame name is shown half.
    auto cut = out.find(" > ", out.size() - kMaxLabel);
    out = "... > " + (cut == std::string::npos ? out.substr(out.size() - kMaxLabel) : out.substr(cut + 3));
  }
  return out;
}

std::string formatDiffReport(const ScalingDiff& d, std::size_t top) {
  const bool strong = d.study.mode == metrics::ScalingMode::Strong;
  std::string out;
  auto line = [&out](const std::string& text) { out += text + '\n'; };
  auto sameFrom = d.runP.processesFrom == d.runQ.processesFrom;
  line(fmt::format("csp-diff: {} scaling of {}, p = {} -> q = {} ({})", strong ? "strong" : "weak", d.metric,
                   d.study.p, d.study.q,
                   sameFrom ? d.runP.processesFrom : d.runP.processesFrom + " / " + d.runQ.processesFrom));
  for (const DiffRun* r : {&d.runP, &d.runQ}) {
    const double sum = r == &d.runP ? d.total().sumP : d.total().sumQ;
    line(fmt::format("  run {}  {}  {} profiles, {} contexts, total {}", r == &d.runP ? 'P' : 'Q',
                     r->database.string(), r->profiles, r->nodes, amount(sum, d.unit)));
    if (r->skippedInputs)
      line(fmt::format("  warning: {} profiles of this run were skipped by csp-prof-mpi; its sums miss their costs",
                       r->skippedInputs));
  }
  const auto& total = d.total();
  line(fmt::format("  excess {}: scaling loss {} of the q run{}", amount(total.excess, d.unit, !strong),
                   percent(total.loss), total.withinNoise ? " (within sampling error)" : ""));
  line(strong ? "  (strong: ideal is equal total cost; excess = sum q - sum p)"
              : "  (weak: ideal is equal cost per process; excess = sum q/q - sum p/p)");
  if (!(total.excess > 0)) {
    line("  the q run lost nothing overall: shares of the total loss are undefined or inverted");
  } else if (const auto hot = hotPath(d); !hot.empty()) {
    const auto& end = d.nodes[hot.back()].inclusive;
    line(fmt::format("  loss hot path (each step holds at least half of the loss above it; ends at loss I {}, "
                     "share {}):",
                     percent(end.loss), percent(end.share)));
    line("    " + pathLabel(d, hot));
  }

  const auto repeated = passThrough(d);
  std::vector<storage::NodeId> order;
  for (storage::NodeId i = 1; i < d.nodes.size(); ++i)
    if (listable(d.nodes[i]) && !repeated[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
    return d.nodes[a].inclusive.loss > d.nodes[b].inclusive.loss;
  });

  const auto row = [&](storage::NodeId id) {
    const DiffNode& n = d.nodes[id];
    return fmt::format("  {:>9} {:>9} {:>9} {:>18}  {} {}", percent(n.inclusive.loss),
                       n.exclusive.measured ? percent(n.exclusive.loss) : std::string("-"), percent(n.inclusive.share),
                       amount(n.inclusive.excess, d.unit, !strong), mark(n), contextLabel(d, id));
  };
  const std::string header =
      fmt::format("  {:>9} {:>9} {:>9} {:>18}  context", "loss I", "loss E", "share I", "excess I");

  line("");
  line(fmt::format("Top {} contexts by inclusive loss (loss I >> loss E: look at the callees)",
                   std::min(top, order.size())));
  line(header);
  bool anyNoise = false;
  for (std::size_t k = 0; k < order.size() && k < top; ++k) {
    line(row(order[k]));
    anyNoise |= mark(d.nodes[order[k]]) == '~';
  }

  // Gains explain shares above 100 % of the total loss elsewhere.
  std::vector<storage::NodeId> gains;
  for (auto id : order)
    if (d.nodes[id].inclusive.excess < 0) gains.push_back(id);
  std::stable_sort(gains.begin(), gains.end(), [&](auto a, auto b) {
    return d.nodes[a].inclusive.loss < d.nodes[b].inclusive.loss;
  });
  gains.resize(std::min<std::size_t>(gains.size(), std::min<std::size_t>(top, 3)));
  if (!gains.empty()) {
    line("");
    line("Largest gains (negative loss)");
    line(header);
    for (auto id : gains) {
      line(row(id));
      anyNoise |= mark(d.nodes[id]) == '~';
    }
  }

  // One-run-only contexts: the outermost listable node of each such subtree (a new call site is
  // shown by its callees), by inclusive loss.
  std::vector<storage::NodeId> alone;
  for (storage::NodeId i = 1; i < d.nodes.size(); ++i) {
    if (d.nodes[i].presence == Presence::Both || d.nodes[i].kind == ScopeKind::CallSite) continue;
    storage::NodeId up = d.nodes[i].parent;
    while (up != 0 && d.nodes[up].kind == ScopeKind::CallSite) up = d.nodes[up].parent;
    if (d.nodes[up].presence == Presence::Both) alone.push_back(i);
  }
  std::stable_sort(alone.begin(), alone.end(), [&](auto a, auto b) {
    return std::fabs(d.nodes[a].inclusive.loss) > std::fabs(d.nodes[b].inclusive.loss);
  });
  line("");
  if (d.onlyP + d.onlyQ == 0) {
    line("Every context occurs in both runs.");
  } else {
    line(fmt::format("Contexts in one run only: {} only in run Q (+), {} only in run P (-); outermost {} of {}:",
                     d.onlyQ, d.onlyP, std::min(top, alone.size()), alone.size()));
    line(header);
    for (std::size_t k = 0; k < alone.size() && k < top; ++k) line(row(alone[k]));
  }
  line("");
  line(fmt::format("loss: % of the q run's {}total {}; share: % of the total loss (over 100 % where other contexts "
                   "gained)",
                   strong ? "" : "per-process ", d.metric));
  // Period 1 samples are exact counts: nothing can be noise.
  const auto noisy = [](const DiffRun& r) { return r.sampled && r.period > 1; };
  if (anyNoise || noisy(d.runP) || noisy(d.runQ))
    line("~: within sampling error (|excess| <= the worst-case error of thesis Eq. A.10): may be noise");
  else
    line(fmt::format("{} is exact in both runs (counted, or period 1): no sampling error", d.metric));
  return out;
}

}  // namespace csp::analysis
