// Dominators and the loop nesting forest of a control-flow graph (structure.hpp).
#include <algorithm>
#include <span>

#include "csp/reduce/structure.hpp"

namespace csp::reduce::structure {

namespace {

std::vector<std::vector<std::uint32_t>> predecessorsOf(const Graph& g) {
  std::vector<std::vector<std::uint32_t>> preds(g.size());
  for (std::uint32_t v = 0; v < g.size(); ++v)
    for (auto w : g.successors[v]) preds[w].push_back(v);
  return preds;
}

// Immediate dominators over nodes 0..n-1 with successors `succ(v)` (a span) and predecessors
// `preds` (Cooper, Harvey, Kennedy: iterate over the reverse postorder until nothing changes).
template <typename Successors>
std::vector<std::uint32_t> dominatorsOf(std::size_t n, std::uint32_t entry, Successors&& succ,
                                        const std::vector<std::vector<std::uint32_t>>& preds) {
  std::vector<std::uint32_t> idom(n, kNone);
  if (entry >= n) return idom;
  // Reverse postorder of what `entry` reaches (iterative depth-first search).
  std::vector<std::uint32_t> rpo;
  {
    std::vector<char> seen(n, 0);
    std::vector<std::pair<std::uint32_t, std::size_t>> stack{{entry, 0}};
    seen[entry] = 1;
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const std::span<const std::uint32_t> s = succ(v);
      if (next < s.size()) {
        const auto w = s[next++];
        if (!seen[w]) {
          seen[w] = 1;
          stack.push_back({w, 0});
        }
        continue;
      }
      rpo.push_back(v);
      stack.pop_back();
    }
    std::reverse(rpo.begin(), rpo.end());
  }
  std::vector<std::uint32_t> order(n, kNone);
  for (std::uint32_t i = 0; i < rpo.size(); ++i) order[rpo[i]] = i;
  idom[entry] = entry;
  auto intersect = [&](std::uint32_t a, std::uint32_t b) {
    while (a != b) {
      while (order[a] > order[b]) a = idom[a];
      while (order[b] > order[a]) b = idom[b];
    }
    return a;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 1; i < rpo.size(); ++i) {
      const auto b = rpo[i];
      std::uint32_t next = kNone;
      for (auto p : preds[b]) {
        if (order[p] == kNone || idom[p] == kNone) continue;  // unreachable, or not processed yet
        next = next == kNone ? p : intersect(p, next);
      }
      if (next != kNone && idom[b] != next) {
        idom[b] = next;
        changed = true;
      }
    }
  }
  return idom;
}

}  // namespace

std::vector<std::uint32_t> dominators(const Graph& g, std::uint32_t entry) {
  return dominatorsOf(
      g.size(), entry, [&](std::uint32_t v) { return std::span<const std::uint32_t>(g.successors[v]); },
      predecessorsOf(g));
}

LoopForest findLoops(const Graph& g) {
  const auto n = static_cast<std::uint32_t>(g.size());
  LoopForest forest;
  forest.innermost.assign(n, kNone);
  if (n == 0) return forest;
  const auto preds = predecessorsOf(g);

  // Depth-first preorder from the entry, then from the nodes nothing reaches (in node order),
  // then from whatever is left (cycles that nothing outside them reaches): decides which entry
  // of an irreducible region is its header.
  std::vector<std::uint32_t> pre(n, kNone);
  {
    std::uint32_t counter = 0;
    auto dfs = [&](std::uint32_t root) {
      if (pre[root] != kNone) return;
      std::vector<std::pair<std::uint32_t, std::size_t>> stack{{root, 0}};
      pre[root] = counter++;
      while (!stack.empty()) {
        auto& [v, next] = stack.back();
        if (next < g.successors[v].size()) {
          const auto w = g.successors[v][next++];
          if (pre[w] == kNone) {
            pre[w] = counter++;
            stack.push_back({w, 0});
          }
          continue;
        }
        stack.pop_back();
      }
    };
    dfs(0);
    for (std::uint32_t v = 1; v < n; ++v)
      if (preds[v].empty()) dfs(v);
    for (std::uint32_t v = 1; v < n; ++v) dfs(v);
  }

  // A loop is reducible when its header dominates every block of it: dominators from the
  // function's entry for the code it reaches; for code it does not reach (behind an unresolved
  // indirect jump), from a virtual root above the blocks that nothing reaches. (From the entry
  // first: alignment padding after a jump is such a block, and it falls into the next loop
  // without being a way into it.)
  std::vector<std::uint32_t> idomEntry, idomRooted;
  auto dominatedBy = [&](const std::vector<std::uint32_t>& idom, std::uint32_t v, std::uint32_t h) {
    for (std::uint32_t steps = 0; v != kNone && steps <= n + 1; ++steps) {
      if (v == h) return true;
      if (v == n || idom[v] == v) return false;
      v = idom[v];
    }
    return false;
  };

  // Tarjan's strongly connected components over a subset of the nodes (those with
  // mark[v] == stamp), iteratively. Components get ids from `nextComponent` on.
  std::vector<std::uint32_t> mark(n, 0), index(n, 0), low(n, 0), component(n, kNone);
  std::vector<char> onStack(n, 0);
  std::uint32_t stamp = 0, nextComponent = 0;
  auto strongComponents = [&](const std::vector<std::uint32_t>& members) {
    std::vector<std::vector<std::uint32_t>> out;
    std::vector<std::uint32_t> sccStack;
    std::uint32_t counter = 0;
    for (auto v : members) index[v] = 0;  // 0 = not visited; visit numbers start at 1
    for (auto root : members) {
      if (index[root] != 0) continue;
      std::vector<std::pair<std::uint32_t, std::size_t>> call{{root, 0}};
      index[root] = low[root] = ++counter;
      sccStack.push_back(root);
      onStack[root] = 1;
      while (!call.empty()) {
        auto& [v, next] = call.back();
        if (next < g.successors[v].size()) {
          const auto w = g.successors[v][next++];
          if (mark[w] != stamp) continue;
          if (index[w] == 0) {
            index[w] = low[w] = ++counter;
            sccStack.push_back(w);
            onStack[w] = 1;
            call.push_back({w, 0});
          } else if (onStack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        const auto done = v;
        call.pop_back();
        if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
        if (low[done] == index[done]) {
          std::vector<std::uint32_t> scc;
          std::uint32_t w;
          do {
            w = sccStack.back();
            sccStack.pop_back();
            onStack[w] = 0;
            component[w] = nextComponent;
            scc.push_back(w);
          } while (w != done);
          ++nextComponent;
          std::sort(scc.begin(), scc.end());
          out.push_back(std::move(scc));
        }
      }
    }
    // Components in the order of their smallest node: the loops' order does not depend on
    // Tarjan's completion order.
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
    return out;
  };

  struct Work {
    std::vector<std::uint32_t> members;
    std::uint32_t parent;
  };
  std::vector<Work> work;
  {
    Work all{std::vector<std::uint32_t>(n), kNone};
    for (std::uint32_t v = 0; v < n; ++v) all.members[v] = v;
    work.push_back(std::move(all));
  }
  while (!work.empty()) {
    Work w = std::move(work.back());
    work.pop_back();
    ++stamp;
    for (auto v : w.members) mark[v] = stamp;
    auto sccs = strongComponents(w.members);
    std::vector<Work> inner;
    for (auto& scc : sccs) {
      if (scc.size() == 1) {
        const auto v = scc[0];
        const auto& s = g.successors[v];
        if (std::find(s.begin(), s.end(), v) == s.end()) continue;  // no cycle
      }
      const auto id = component[scc[0]];
      std::vector<std::uint32_t> entries;
      for (auto v : scc) {
        bool entered = v == 0;
        for (auto p : preds[v]) entered = entered || component[p] != id || mark[p] != stamp;
        if (entered) entries.push_back(v);
      }
      const auto& candidates = entries.empty() ? scc : entries;
      const auto header =
          *std::min_element(candidates.begin(), candidates.end(), [&](auto a, auto b) { return pre[a] < pre[b]; });
      LoopForest::Loop loop;
      loop.header = header;
      loop.parent = w.parent;
      if (idomEntry.empty())
        idomEntry = dominatorsOf(
            n, 0, [&](std::uint32_t v) { return std::span<const std::uint32_t>(g.successors[v]); }, preds);
      if (idomEntry[header] == kNone && idomRooted.empty()) {
        // node n: the virtual root, above the entry and the nodes nothing reaches
        auto rootedPreds = preds;
        rootedPreds.emplace_back();
        rootedPreds[0].push_back(n);
        for (std::uint32_t v = 1; v < n; ++v)
          if (preds[v].empty()) rootedPreds[v].push_back(n);
        std::vector<std::uint32_t> rootSuccessors{0};
        for (std::uint32_t v = 1; v < n; ++v)
          if (preds[v].empty()) rootSuccessors.push_back(v);
        idomRooted = dominatorsOf(
            n + 1, n,
            [&](std::uint32_t v) {
              return v < n ? std::span<const std::uint32_t>(g.successors[v])
                           : std::span<const std::uint32_t>(rootSuccessors);
            },
            rootedPreds);
      }
      const auto& idom = idomEntry[header] != kNone ? idomEntry : idomRooted;
      if (idom[header] != kNone) {
        loop.irreducible = !std::all_of(scc.begin(), scc.end(), [&](auto v) { return dominatedBy(idom, v, header); });
      } else {
        loop.irreducible = entries.size() > 1;  // a cycle nothing reaches: count its entries
      }
      const auto loopId = static_cast<std::uint32_t>(forest.loops.size());
      for (auto v : scc) forest.innermost[v] = loopId;
      Work nested{{}, loopId};
      for (auto v : scc)
        if (v != header) nested.members.push_back(v);
      loop.blocks = std::move(scc);
      forest.loops.push_back(std::move(loop));
      if (!nested.members.empty()) inner.push_back(std::move(nested));
    }
    // Last pushed is processed first: push in reverse so loops come out in order.
    for (auto it = inner.rbegin(); it != inner.rend(); ++it) work.push_back(std::move(*it));
  }
  return forest;
}

}  // namespace csp::reduce::structure
