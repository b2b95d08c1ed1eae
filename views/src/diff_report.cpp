// The csp-diff report as data (answers.hpp; docs/diff.md "Report"): which contexts are listed,
// in which order. render_diff.cpp prints it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "csp/views/answers.hpp"

namespace csp::views {

using analysis::DiffNode;
using analysis::Presence;
using analysis::ScalingDiff;

namespace {

// Keeps the tail of long paths: the innermost frames are the ones to act on.
constexpr std::size_t kMaxLabel = 110;

// Labels show file base names: full paths are in the database, and a path of paths is unreadable.
std::string segment(const DiffNode& n) {
  switch (n.kind) {
    case ScopeKind::Root:
      return "<program root>";
    case ScopeKind::ProcFrame:
      return n.name.empty() ? "<unknown procedure>" : n.name;
    case ScopeKind::Alien:
      return "inlined " + n.name;
    // Code without a line table: loops by header address, statements and calls by offset.
    case ScopeKind::Loop:
      return n.name.empty() ? fmt::format("loop {}:{}", baseName(n.file), n.line) : n.name;
    case ScopeKind::CallSite:
    case ScopeKind::Stmt:
      if (!n.name.empty()) return n.name;
      return n.file.empty() ? std::string() : fmt::format("{}:{}", baseName(n.file), n.line);
  }
  return "?";
}

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

DiffRow rowOf(const ScalingDiff& d, storage::NodeId id) {
  const DiffNode& n = d.nodes[id];
  return {id, contextLabel(d, id), mark(n), n.inclusive, n.exclusive};
}

// The listable contexts that repeat no other row, by inclusive loss.
std::vector<storage::NodeId> rankedContexts(const ScalingDiff& d) {
  const auto repeated = passThrough(d);
  std::vector<storage::NodeId> order;
  for (storage::NodeId i = 1; i < d.nodes.size(); ++i)
    if (listable(d.nodes[i]) && !repeated[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](auto a, auto b) { return d.nodes[a].inclusive.loss > d.nodes[b].inclusive.loss; });
  return order;
}

// Gains explain shares above 100 % of the total loss elsewhere.
std::vector<storage::NodeId> largestGains(const ScalingDiff& d, const std::vector<storage::NodeId>& order,
                                          std::size_t top) {
  std::vector<storage::NodeId> gains;
  for (auto id : order)
    if (d.nodes[id].inclusive.excess < 0) gains.push_back(id);
  std::stable_sort(gains.begin(), gains.end(),
                   [&](auto a, auto b) { return d.nodes[a].inclusive.loss < d.nodes[b].inclusive.loss; });
  gains.resize(std::min<std::size_t>(gains.size(), std::min<std::size_t>(top, 3)));
  return gains;
}

// One-run-only contexts: the outermost listable node of each such subtree (a new call site is
// shown by its callees), by inclusive loss.
std::vector<storage::NodeId> outermostOneRunOnly(const ScalingDiff& d) {
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
  return alone;
}

}  // namespace

std::string contextLabel(const ScalingDiff& diff, storage::NodeId node) {
  if (node == 0) return segment(diff.nodes[0]);
  std::vector<std::string> parts;
  // A call site without line information is just an edge: it says nothing.
  for (storage::NodeId at = node; at != 0 && at != kNoIndex; at = diff.nodes[at].parent) {
    auto part = segment(diff.nodes[at]);
    if (!part.empty())
      parts.push_back(std::move(part));
    else if (diff.nodes[at].kind == ScopeKind::Stmt)
      parts.emplace_back("<unknown line>");
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

DiffReport diffReport(const ScalingDiff& d, std::size_t top, std::vector<analysis::StateExcess> states) {
  DiffReport r;
  r.study = d.study;
  r.metric = d.metric;
  r.unit = d.unit;
  r.runP = d.runP;
  r.runQ = d.runQ;
  r.runCountsKnown = !d.readBack;
  r.total = d.total();
  if (r.total.excess > 0) {
    r.hotPath = hotPath(d);
    if (!r.hotPath.empty()) {
      r.hotPathLabel = pathLabel(d, r.hotPath);
      r.hotPathEnd = d.nodes[r.hotPath.back()].inclusive;
    }
  }
  const auto order = rankedContexts(d);
  for (std::size_t k = 0; k < order.size() && k < top; ++k) r.losses.push_back(rowOf(d, order[k]));
  for (auto id : largestGains(d, order, top)) r.gains.push_back(rowOf(d, id));
  const auto alone = outermostOneRunOnly(d);
  r.oneRunOnlyCount = alone.size();
  for (std::size_t k = 0; k < alone.size() && k < top; ++k) r.oneRunOnly.push_back(rowOf(d, alone[k]));
  r.onlyP = d.onlyP;
  r.onlyQ = d.onlyQ;
  // Period 1 samples are exact counts: nothing can be noise. A diff database read back keeps no
  // periods: there a noise at the root says that a run has an error.
  const auto noisy = [](const analysis::DiffRun& run) { return run.sampled && run.period > 1; };
  r.exact = d.readBack ? !(r.total.noise > 0) : !noisy(d.runP) && !noisy(d.runQ);
  r.states = std::move(states);
  return r;
}

}  // namespace csp::views
