#include "csp/reduce/projection.hpp"

#include <algorithm>

namespace csp::reduce {

std::vector<StmtValue> projectProfile(const ThreadProfile& p, StringTable& strings, Attributor& attributor,
                                      const CctStep& step, const ProjectionContext& context) {
  const std::size_t n = p.cct.size();
  std::vector<StmtValue> out;
  out.reserve(p.values.size());
  // Where children attach (the interior chain's end) and where counts go (the leaf chain's end).
  std::vector<std::uint32_t> interior(n, kNoIndex), leaf(n, kNoIndex);
  interior[0] = 0;
  std::vector<std::uint8_t> partialLeaf;  // address profiles: the leaf lies on an incomplete path

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
    // The parent of every incomplete path, created on first use.
    std::uint32_t truncatedRoot = kNoIndex;
    auto truncated = [&] {
      if (truncatedRoot == kNoIndex) {
        const auto proc = step(0, {ScopeKind::ProcFrame, strings.intern(kTruncatedPathsName), 0, 0, 0});
        truncatedRoot = step(proc, {ScopeKind::CallSite, 0, 0, 0, 0});
      }
      return truncatedRoot;
    };
    // Whether a raw node's interior (resp. leaf) scope lies on an incomplete path.
    std::vector<std::uint8_t> partialInterior(n, 0);
    partialLeaf.assign(n, 0);
    const std::uint32_t jitModule = context.jit ? strings.intern(kJitModuleName) : 0;
    ScopeKey jitChain[2];
    for (std::size_t i = 1; i < n; ++i) {
      const AddressFrame& f = p.addressFrames[p.cct.frame[i]];
      const LoadModule& module = p.modules[f.module];
      const std::uint32_t parent = p.cct.parent[i];
      const bool unmapped = module.path == kUnmappedModulePath;
      const std::string* jitName = unmapped && context.jit ? context.jit->find(f.offset) : nullptr;
      auto chainOf = [&](bool leafRole) -> std::span<const ScopeKey> {
        if (jitName == nullptr) return attributor.attribute(module, f.offset, leafRole);
        jitChain[0] = {ScopeKind::ProcFrame, strings.intern(*jitName), 0, 0, jitModule};
        jitChain[1] = {leafRole ? ScopeKind::Stmt : ScopeKind::CallSite, 0, 0, 0, 0};
        return jitChain;
      };
      // Where this frame's scopes attach: below its caller's, at the root for the outermost
      // frame of a complete path, else below the truncated-paths procedure. The callers of code
      // outside every module come from unwinding without unwind information: they are dropped.
      auto baseOf = [&](bool leafRole, std::uint8_t& partial) -> std::uint32_t {
        if (unmapped && jitName == nullptr) {
          partial = 1;
          return truncated();
        }
        if (parent == 0) {
          const bool complete = !unmapped && attributor.startsPath(module, f.offset, leafRole);
          partial = complete ? 0 : 1;
          return complete ? 0 : truncated();
        }
        partial = partialInterior[parent];
        return interior[parent];
      };
      if (hasChild[i]) interior[i] = fold(baseOf(false, partialInterior[i]), chainOf(false));
      if (hasValue[i]) leaf[i] = fold(baseOf(true, partialLeaf[i]), chainOf(true));
    }
  }
  std::uint64_t truncatedSamples = 0;
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    const auto metric = p.values.metric[v];
    const auto node = p.values.node[v];
    out.push_back({leaf[node], metric, p.values.count[v] * p.metrics[metric].period});
    if (!partialLeaf.empty() && partialLeaf[node] && p.metrics[metric].kind == MetricKind::Sampled)
      truncatedSamples += p.values.count[v];
  }
  if (context.truncatedSamples) *context.truncatedSamples = truncatedSamples;
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
