#include "csp/reduce/projection.hpp"

#include <algorithm>

namespace csp::reduce {

std::vector<StmtValue> projectProfile(const ThreadProfile& p, StringTable& strings, Attributor& attributor,
                                      const CctStep& step) {
  const std::size_t n = p.cct.size();
  std::vector<StmtValue> out;
  out.reserve(p.values.size());
  // Where children attach (the interior chain's end) and where counts go (the leaf chain's end).
  std::vector<std::uint32_t> interior(n, kNoIndex), leaf(n, kNoIndex);
  interior[0] = 0;

  if (p.frameKind == FrameKind::Symbolic) {
    std::vector<std::uint32_t> stringId(p.strings.size(), kNoIndex);
    auto str = [&](std::uint32_t s) {
      if (stringId[s] == kNoIndex) stringId[s] = strings.intern(p.strings[s]);
      return stringId[s];
    };
    for (std::size_t i = 1; i < n; ++i) {
      const SymbolicFrame& f = p.symbolicFrames[p.cct.frame[i]];
      const ScopeKey key{f.scope, str(f.name), str(f.file), f.line, str(f.module)};
      interior[i] = leaf[i] = step(interior[p.cct.parent[i]], key);
    }
  } else {
    std::vector<std::uint8_t> hasChild(n, 0), hasValue(n, 0);
    for (std::size_t i = 1; i < n; ++i) hasChild[p.cct.parent[i]] = 1;
    for (auto node : p.values.node) hasValue[node] = 1;
    auto fold = [&](std::uint32_t from, std::span<const ScopeKey> chain) {
      for (const auto& key : chain) from = step(from, key);
      return from;
    };
    for (std::size_t i = 1; i < n; ++i) {
      const AddressFrame& f = p.addressFrames[p.cct.frame[i]];
      const LoadModule& module = p.modules[f.module];
      const std::uint32_t base = interior[p.cct.parent[i]];
      if (hasChild[i]) interior[i] = fold(base, attributor.attribute(module, f.offset, false));
      if (hasValue[i]) leaf[i] = fold(base, attributor.attribute(module, f.offset, true));
    }
  }
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    const auto metric = p.values.metric[v];
    out.push_back({leaf[p.values.node[v]], metric, p.values.count[v] * p.metrics[metric].period});
  }
  return out;
}

ValueScratch::ValueScratch(std::size_t nodes, std::size_t metrics)
    : metrics_(metrics), exclusive_(nodes * metrics, 0), inclusive_(nodes * metrics, 0), touched_(nodes, 0) {}

ThreadValues ValueScratch::compute(const FinalCct& cct, const std::vector<StmtValue>& values) {
  // Final ids are preorder numbers, so a parent's id is below its children's: inclusive values
  // propagate in one pass over the touched nodes in decreasing id order.
  for (const StmtValue& v : values) {
    const std::size_t m = v.metric;
    exclusive_[v.node * metrics_ + m] += v.value;  // a statement (dynamic scope): its own value
    inclusive_[v.node * metrics_ + m] += v.value;
    // Enclosing static scopes: a Loop or Alien counts its statement children; the nearest
    // ProcFrame counts every statement not behind a call site, i.e. those it is the nearest
    // procedure frame of (only loops and inlined scopes lie between).
    const std::uint32_t parent = cct.node(v.node).parent;
    const ScopeKind pk = cct.node(parent).key.kind;
    if (pk == ScopeKind::Loop || pk == ScopeKind::Alien) exclusive_[parent * metrics_ + m] += v.value;
    std::uint32_t proc = parent;
    while (proc != kNoIndex && cct.node(proc).key.kind != ScopeKind::ProcFrame) proc = cct.node(proc).parent;
    if (proc != kNoIndex) exclusive_[proc * metrics_ + m] += v.value;
    // Mark the path to the root; stop at the first node already on a marked path.
    for (std::uint32_t a = v.node; a != kNoIndex && !touched_[a]; a = cct.node(a).parent) {
      touched_[a] = 1;
      touchedList_.push_back(a);
    }
  }
  std::sort(touchedList_.begin(), touchedList_.end());
  for (auto it = touchedList_.rbegin(); it != touchedList_.rend(); ++it) {
    const std::uint32_t parent = cct.node(*it).parent;
    if (parent == kNoIndex) continue;
    for (std::size_t m = 0; m < metrics_; ++m) inclusive_[parent * metrics_ + m] += inclusive_[*it * metrics_ + m];
  }
  ThreadValues out;
  out.node.reserve(touchedList_.size() * metrics_);
  out.metric.reserve(touchedList_.size() * metrics_);
  out.exclusive.reserve(touchedList_.size() * metrics_);
  out.inclusive.reserve(touchedList_.size() * metrics_);
  for (auto node : touchedList_) {
    for (std::size_t m = 0; m < metrics_; ++m) {
      const std::size_t at = node * metrics_ + m;
      if (exclusive_[at] || inclusive_[at]) {
        out.node.push_back(node);
        out.metric.push_back(static_cast<std::uint16_t>(m));
        out.exclusive.push_back(exclusive_[at]);
        out.inclusive.push_back(inclusive_[at]);
      }
      exclusive_[at] = inclusive_[at] = 0;
    }
    touched_[node] = 0;
  }
  touchedList_.clear();
  return out;
}

}  // namespace csp::reduce
