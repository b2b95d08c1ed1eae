#include "csp/reduce/projection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "csp/reduce/logical.hpp"

namespace csp::reduce {

namespace {

// The frames above a Stopped frame (docs/postprocessing.md, "Code without unwind information").
struct GapWalk {
  bool complete = false;              // the frames found lead to `resumed`, or to a stack's start
  std::uint32_t resumed = kNoIndex;   // the frame found by the tables that the recipes lead to
  std::vector<std::uint32_t> frames;  // the candidates that are frames, innermost first
};

// Follows the unwind recipes from the Stopped frame `stopped` through the candidates above it.
// Positions are in bytes above the stopped frame's stack pointer, as the notes' slots count them.
GapWalk walkGap(const ThreadProfile& p, Attributor& attributor, std::uint32_t stopped, bool leafRole) {
  GapWalk w;
  // Stack word -> the frame whose address it held: the candidates, then the frames that the
  // tables found from the first candidate that has them (usually that frame, but a stale return
  // address can come first: the tables' unwind from it then finds the real frames further up).
  std::map<std::uint32_t, std::uint32_t> bySlot;
  std::set<std::uint32_t> resumed;
  std::uint32_t above = p.cct.parent[stopped];
  for (; above != 0 && p.cct.note(above).kind == UnwindNoteKind::Candidate; above = p.cct.parent[above])
    bySlot.emplace(p.cct.note(above).slot, above);
  for (; above != 0 && p.cct.note(above).kind == UnwindNoteKind::Resumed; above = p.cct.parent[above]) {
    bySlot.emplace(p.cct.note(above).slot, above);
    resumed.insert(above);
  }
  auto linkAt = [&](std::uint32_t node) -> std::optional<std::int64_t> {
    const auto link = p.cct.note(node).link;
    return link ? std::optional<std::int64_t>(std::int64_t{link - 1} * 8) : std::nullopt;
  };
  std::int64_t sp = 0;
  std::optional<std::int64_t> bp = linkAt(stopped);
  std::uint32_t node = stopped;
  bool leaf = leafRole;
  auto moduleOf = [&](std::uint32_t n) -> const LoadModule& {
    return p.modules[p.addressFrames[p.cct.frame[n]].module];
  };
  auto offsetOf = [&](std::uint32_t n) { return p.addressFrames[p.cct.frame[n]].offset; };
  for (;;) {
    const LoadModule& module = moduleOf(node);
    const auto rule =
        module.path == kUnmappedModulePath ? std::nullopt : attributor.frameRule(module, offsetOf(node), leaf);
    std::optional<std::int64_t> cfa;
    if (rule && rule->base == structure::FrameRule::Base::Sp) cfa = sp + rule->cfa;
    if (rule && rule->base == structure::FrameRule::Base::Bp && bp) cfa = *bp + rule->cfa;
    if (!cfa || *cfa < sp + 8 || *cfa % 8 != 0) break;
    const auto next = bySlot.find(static_cast<std::uint32_t>(*cfa / 8 - 1));
    if (next == bySlot.end()) break;
    // The caller's frame pointer: unchanged, or saved by a `push %rbp` just below the return address.
    if (!rule->bpKept) bp = rule->bpSaved && rule->bpSave == 16 ? linkAt(next->second) : std::nullopt;
    if (resumed.count(next->second)) {
      w.complete = true;
      w.resumed = next->second;
      return w;
    }
    w.frames.push_back(next->second);
    node = next->second;
    leaf = false;
    sp = *cfa;
  }
  const LoadModule& module = moduleOf(node);
  w.complete = module.path != kUnmappedModulePath && attributor.startsPath(module, offsetOf(node), leaf);
  return w;
}

}  // namespace

namespace {

// Where a profile's raw nodes land on the canonical CCT, and what the path quality counts need.
struct Placement {
  explicit Placement(std::size_t n) : interior(n, kNoIndex), leaf(n, kNoIndex) { interior[0] = 0; }
  // Where children attach (the interior chain's end) and where counts go (the leaf chain's end).
  std::vector<std::uint32_t> interior, leaf;
  std::vector<std::uint8_t> partialLeaf;  // empty, or per node: the leaf lies on an incomplete path
  std::vector<std::uint8_t> scannedLeaf;  // empty, or per node: its path went through stack scans
                                          // (0 no, 1 all of them completed, 2 one was not)
};

// The parent of every incomplete path, created on first use.
class TruncatedPaths {
 public:
  TruncatedPaths(StringTable& strings, const CctStep& step) : strings_(strings), step_(step) {}
  std::uint32_t operator()() {
    if (root_ == kNoIndex) {
      const auto proc = step_(0, {ScopeKind::ProcFrame, strings_.intern(kTruncatedPathsName), 0, 0, 0});
      root_ = step_(proc, {ScopeKind::CallSite, 0, 0, 0, 0});
    }
    return root_;
  }

 private:
  StringTable& strings_;
  const CctStep& step_;
  std::uint32_t root_ = kNoIndex;
};

// Symbolic frames name their scopes; a Partial path start hangs the path below the truncated
// paths, a Placeholder's procedure gets the placeholder module.
void placeSymbolic(const ThreadProfile& p, StringTable& strings, const CctStep& step, Placement& at) {
  const std::size_t n = p.cct.size();
  TruncatedPaths truncated(strings, step);
  std::vector<std::uint32_t> stringId(p.strings.size(), kNoIndex);
  auto str = [&](std::uint32_t s) {
    if (stringId[s] == kNoIndex) stringId[s] = strings.intern(p.strings[s]);
    return stringId[s];
  };
  const bool marked = !p.cct.pathStart.empty();
  if (marked) at.partialLeaf.assign(n, 0);
  for (std::size_t i = 1; i < n; ++i) {
    const SymbolicFrame& f = p.symbolicFrames[p.cct.frame[i]];
    ScopeKey key{f.scope, str(f.name), str(f.file), f.line, str(f.module)};
    const std::uint32_t parent = p.cct.parent[i];
    const PathStart start = p.cct.start(i);
    if (start == PathStart::Placeholder) key.module = strings.intern(kPlaceholderModuleName);
    const bool partialStart = parent == 0 && start == PathStart::Partial;
    if (marked) at.partialLeaf[i] = partialStart ? 1 : at.partialLeaf[parent];
    at.interior[i] = at.leaf[i] = step(partialStart ? truncated() : at.interior[parent], key);
  }
}

// Address frames through the attributor, with the checks of path completeness (projection.hpp).
void placeAddresses(const ThreadProfile& p, StringTable& strings, Attributor& attributor, const CctStep& step,
                    const PerfMap* jit, Placement& at) {
  const std::size_t n = p.cct.size();
  std::vector<std::uint8_t> hasChild(n, 0), hasValue(n, 0);
  for (std::size_t i = 1; i < n; ++i) hasChild[p.cct.parent[i]] = 1;
  for (auto node : p.values.node) hasValue[node] = 1;
  auto fold = [&](std::uint32_t from, std::span<const ScopeKey> chain) {
    for (const auto& key : chain) from = step(from, key);
    return from;
  };
  TruncatedPaths truncated(strings, step);
  // Whether a raw node's interior (resp. leaf) scope lies on an incomplete path, and whether its
  // path went through stack scans (Placement::scannedLeaf).
  std::vector<std::uint8_t> partialInterior(n, 0), scannedInterior(n, 0);
  at.partialLeaf.assign(n, 0);
  at.scannedLeaf.assign(n, 0);
  const std::uint32_t jitModule = jit ? strings.intern(kJitModuleName) : 0;
  ScopeKey jitChain[2];
  for (std::size_t i = 1; i < n; ++i) {
    const UnwindNoteKind note = p.cct.note(i).kind;
    if (note == UnwindNoteKind::Candidate) continue;  // placed by the Stopped frame below it, if it is a frame
    const AddressFrame& f = p.addressFrames[p.cct.frame[i]];
    const LoadModule& module = p.modules[f.module];
    const std::uint32_t parent = p.cct.parent[i];
    const bool unmapped = module.path == kUnmappedModulePath;
    const bool ompRuntime = module.path == kOmpRuntimeName;  // the folded runtime frames (logical.hpp)
    const std::string* jitName = unmapped && jit ? jit->find(f.offset) : nullptr;
    auto chainOf = [&](bool leafRole) -> std::span<const ScopeKey> {
      if (ompRuntime) {
        const std::uint32_t name = strings.intern(kOmpRuntimeName);
        jitChain[0] = {ScopeKind::ProcFrame, name, 0, 0, name};
        jitChain[1] = {leafRole ? ScopeKind::Stmt : ScopeKind::CallSite, 0, 0, 0, 0};
        return jitChain;
      }
      if (jitName == nullptr) return attributor.attribute(module, f.offset, leafRole);
      jitChain[0] = {ScopeKind::ProcFrame, strings.intern(*jitName), 0, 0, jitModule};
      jitChain[1] = {leafRole ? ScopeKind::Stmt : ScopeKind::CallSite, 0, 0, 0, 0};
      return jitChain;
    };
    // Where this frame's scopes attach: below its caller's, at the root for the outermost
    // frame of a complete path, else below the truncated-paths procedure. The callers of code
    // outside every module come from unwinding without unwind information: they are dropped.
    // Above a frame without unwind tables: the candidates that its unwind recipe and theirs
    // pick, then the frame where the measurement resumed (docs/postprocessing.md).
    auto scannedBase = [&](bool leafRole, std::uint8_t& partial, std::uint8_t& scanned) -> std::uint32_t {
      const GapWalk w = walkGap(p, attributor, static_cast<std::uint32_t>(i), leafRole);
      std::uint32_t base = 0;
      if (!w.complete) {
        base = truncated();
        partial = 1;
        scanned = 2;
      } else if (w.resumed != kNoIndex) {
        base = at.interior[w.resumed];
        partial = partialInterior[w.resumed];
        scanned = std::max<std::uint8_t>(scannedInterior[w.resumed], 1);
      } else {
        partial = 0;
        scanned = 1;
      }
      for (auto it = w.frames.rbegin(); it != w.frames.rend(); ++it) {
        const AddressFrame& c = p.addressFrames[p.cct.frame[*it]];
        base = fold(base, attributor.attribute(p.modules[c.module], c.offset, false));
      }
      return base;
    };
    // A path's outermost frame starts it where the profile says so, else where the binaries do.
    auto startsPath = [&](bool leafRole) {
      switch (p.cct.start(i)) {
        case PathStart::Complete:
        case PathStart::Placeholder:
          return true;
        case PathStart::Partial:
          return false;
        case PathStart::Unknown:
          break;
      }
      return ompRuntime || (!unmapped && attributor.startsPath(module, f.offset, leafRole));
    };
    auto baseOf = [&](bool leafRole, std::uint8_t& partial, std::uint8_t& scanned) -> std::uint32_t {
      scanned = parent == 0 ? 0 : scannedInterior[parent];
      if (unmapped && jitName == nullptr) {
        partial = 1;
        return truncated();
      }
      if (note == UnwindNoteKind::Stopped) return scannedBase(leafRole, partial, scanned);
      if (parent == 0) {
        const bool complete = startsPath(leafRole);
        partial = complete ? 0 : 1;
        return complete ? 0 : truncated();
      }
      partial = partialInterior[parent];
      return at.interior[parent];
    };
    if (hasChild[i]) at.interior[i] = fold(baseOf(false, partialInterior[i], scannedInterior[i]), chainOf(false));
    if (hasValue[i]) at.leaf[i] = fold(baseOf(true, at.partialLeaf[i], at.scannedLeaf[i]), chainOf(true));
  }
}

}  // namespace

std::vector<StmtValue> projectProfile(const ThreadProfile& raw, StringTable& strings, Attributor& attributor,
                                      const CctStep& step, const ProjectionContext& context) {
  const bool marked = hasLogicalMarkers(raw);
  ThreadProfile stitched;
  if (marked) stitched = stitchLogicalPaths(raw, !context.physical);
  const ThreadProfile& p = marked ? stitched : raw;
  Placement at(p.cct.size());
  if (p.frameKind == FrameKind::Symbolic)
    placeSymbolic(p, strings, step, at);
  else
    placeAddresses(p, strings, attributor, step, context.jit, at);
  // One statement value per value of the profile, in its order (a loop that only copies, over
  // arrays: the per-metric facts looked up once); the samples on incomplete or scanned paths are
  // counted in loops of their own, only when the placement recorded such paths.
  const std::size_t n = p.values.size();
  std::vector<std::uint64_t> period(p.metrics.size());
  std::vector<std::uint8_t> sampledCount(p.metrics.size());
  for (std::size_t m = 0; m < p.metrics.size(); ++m) {
    period[m] = p.metrics[m].period;  // (a real-valued metric has period 1: its bit pattern stays as it is)
    sampledCount[m] = p.metrics[m].kind == MetricKind::Sampled && p.metrics[m].valueType == ValueType::Count;
  }
  std::vector<StmtValue> out;
  out.reserve(n);
  const std::uint32_t* node = p.values.node.data();
  const std::uint16_t* metric = p.values.metric.data();
  const std::uint64_t* count = p.values.count.data();
  const std::uint32_t* leaf = at.leaf.data();
  for (std::size_t v = 0; v < n; ++v) out.push_back({leaf[node[v]], metric[v], count[v] * period[metric[v]]});
  std::uint64_t truncatedSamples = 0, scannedSamples = 0, recoveredSamples = 0;
  if (!at.partialLeaf.empty())
    for (std::size_t v = 0; v < n; ++v)
      if (sampledCount[metric[v]] && at.partialLeaf[node[v]]) truncatedSamples += count[v];
  if (!at.scannedLeaf.empty())
    for (std::size_t v = 0; v < n; ++v) {
      if (!sampledCount[metric[v]]) continue;
      if (at.scannedLeaf[node[v]] != 0) scannedSamples += count[v];
      if (at.scannedLeaf[node[v]] == 1) recoveredSamples += count[v];
    }
  if (context.truncatedSamples) *context.truncatedSamples = truncatedSamples;
  if (context.scannedSamples) *context.scannedSamples = scannedSamples;
  if (context.recoveredSamples) *context.recoveredSamples = recoveredSamples;
  return out;
}

ValueScratch::ValueScratch(std::size_t nodes, std::vector<bool> real)
    : metrics_(real.size()),
      real_(real.begin(), real.end()),
      anyReal_(std::find(real.begin(), real.end(), true) != real.end()),
      exclusive_(nodes * metrics_, 0),
      inclusive_(nodes * metrics_, 0),
      touched_((nodes + 63) / 64, 0) {}

// Parents precede children (preorder ids): one pass finds every node's enclosing static scopes.
void ValueScratch::learnStaticScopes(const FinalCct& cct) {
  const std::size_t n = cct.size();
  loopParent_.assign(n, kNoIndex);
  proc_.assign(n, kNoIndex);
  parent_.assign(n, kNoIndex);
  for (std::uint32_t id = 1; id < n; ++id) {
    const std::uint32_t parent = cct.node(id).parent;
    parent_[id] = parent;
    const ScopeKind pk = cct.node(parent).key.kind;
    if (pk == ScopeKind::Loop || pk == ScopeKind::Alien) loopParent_[id] = parent;
    proc_[id] = pk == ScopeKind::ProcFrame ? parent : proc_[parent];
  }
}

// `Metrics`: metrics_ when it is one of the few counts the passes are compiled for (a constant
// row width: no multiplication by a loaded count, the inclusive loop unrolled), 0 otherwise.
template <bool AnyReal, std::size_t Metrics>
void ValueScratch::addStatements(const std::vector<StmtValue>& values) {
  const std::size_t metrics = Metrics != 0 ? Metrics : metrics_;
  for (const StmtValue& v : values) {
    const std::size_t m = v.metric;
    add<AnyReal>(exclusive_[v.node * metrics + m], m, v.value);  // a statement (dynamic scope): its own value
    add<AnyReal>(inclusive_[v.node * metrics + m], m, v.value);
    // Enclosing static scopes: a Loop or Alien counts its statement children; the nearest
    // ProcFrame counts every statement not behind a call site, i.e. those it is the nearest
    // procedure frame of (only loops and inlined scopes lie between).
    if (loopParent_[v.node] != kNoIndex) add<AnyReal>(exclusive_[loopParent_[v.node] * metrics + m], m, v.value);
    if (proc_[v.node] != kNoIndex) add<AnyReal>(exclusive_[proc_[v.node] * metrics + m], m, v.value);
    // Mark the path to the root; stop at the first node already on a marked path.
    for (std::uint32_t a = v.node; a != kNoIndex; a = parent_[a]) {
      std::uint64_t& word = touched_[a / 64];
      const std::uint64_t bit = std::uint64_t{1} << (a % 64);
      if (word & bit) break;
      word |= bit;
      ++touchedCount_;
    }
  }
}

// Final ids are preorder numbers, so a parent's id is below its children's: inclusive values
// propagate in one pass over the touched nodes in decreasing id order.
template <bool AnyReal, std::size_t Metrics>
void ValueScratch::propagateInclusive() {
  const std::size_t metrics = Metrics != 0 ? Metrics : metrics_;
  for (std::size_t w = touched_.size(); w-- > 0;) {
    for (std::uint64_t bits = touched_[w]; bits != 0; bits &= ~(std::uint64_t{1} << (63 - __builtin_clzll(bits)))) {
      const auto node = static_cast<std::uint32_t>(w * 64 + 63 - static_cast<std::size_t>(__builtin_clzll(bits)));
      const std::uint32_t parent = parent_[node];
      if (parent == kNoIndex) continue;
      for (std::size_t m = 0; m < metrics; ++m)
        add<AnyReal>(inclusive_[parent * metrics + m], m, inclusive_[node * metrics + m]);
    }
  }
}

// The touched nodes in ascending order, the scratch space cleared behind them; each node's values
// also to `perNode(node, exclusive, inclusive)` first. `Metrics`: metrics_ when it is one of the
// few counts the loops are unrolled for, 0 otherwise.
template <std::size_t Metrics, typename PerNode>
[[gnu::always_inline]] inline ThreadValues ValueScratch::gather(PerNode&& perNode) {
  const std::size_t metrics = Metrics != 0 ? Metrics : metrics_;
  // Room for every touched node's values, not zero-filled (UninitializedAllocator), written in
  // place and then cut to what was written.
  ThreadValues out;
  out.rows.resize(touchedCount_ * metrics);
  ThreadValue* row = out.rows.data();
  std::uint64_t* scratchExclusive = exclusive_.data();
  std::uint64_t* scratchInclusive = inclusive_.data();
  std::uint64_t* touched = touched_.data();
  const std::size_t words = touched_.size();
  std::size_t used = 0;
  for (std::size_t w = 0; w < words; ++w) {
    for (std::uint64_t bits = touched[w]; bits != 0; bits &= bits - 1) {
      const auto n = static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits)));
      std::uint64_t* e = scratchExclusive + std::size_t{n} * metrics;
      std::uint64_t* i = scratchInclusive + std::size_t{n} * metrics;
      perNode(n, e, i);
      for (std::size_t m = 0; m < metrics; ++m) {
        // Written whatever they hold; kept only when one is non-zero.
        row[used] = {n, static_cast<std::uint16_t>(m), e[m], i[m]};
        used += (e[m] | i[m]) != 0 ? 1 : 0;
        e[m] = i[m] = 0;
      }
    }
    touched[w] = 0;
  }
  touchedCount_ = 0;
  out.rows.resize(used);
  return out;
}

// With `byProfile`, the values by profile are encoded node by node as they are gathered; the
// encoding's state is a local of this function, so that it stays in registers.
template <std::size_t Metrics>
ThreadValues ValueScratch::collect(storage::ProfileBlockEncoder* byProfile) {
  if (byProfile == nullptr) return gather<Metrics>([](std::uint32_t, const std::uint64_t*, const std::uint64_t*) {});
  auto encoding = byProfile->begin();
  ThreadValues out = gather<Metrics>([&encoding](std::uint32_t n, const std::uint64_t* e, const std::uint64_t* i) {
    encoding.addNode<Metrics>(n, e, i);
  });
  out.byProfile = byProfile->finish(encoding);
  return out;
}

ThreadValues ValueScratch::compute(const FinalCct& cct, const std::vector<StmtValue>& values,
                                   storage::ProfileBlockEncoder* byProfile) {
  if (byProfile && byProfile->metrics() != metrics_)
    throw std::logic_error(
        fmt::format("ValueScratch: {} metrics, the by-profile encoder's {}", metrics_, byProfile->metrics()));
  if (loopParent_.size() != cct.size()) learnStaticScopes(cct);
  switch (metrics_) {
    case 1:
      return compute<1>(values, byProfile);
    case 2:
      return compute<2>(values, byProfile);
    case 3:
      return compute<3>(values, byProfile);
    case 4:
      return compute<4>(values, byProfile);
    default:
      return compute<0>(values, byProfile);
  }
}

template <std::size_t Metrics>
ThreadValues ValueScratch::compute(const std::vector<StmtValue>& values, storage::ProfileBlockEncoder* byProfile) {
  if (anyReal_) {
    addStatements<true, Metrics>(values);
    propagateInclusive<true, Metrics>();
  } else {
    addStatements<false, Metrics>(values);
    propagateInclusive<false, Metrics>();
  }
  return collect<Metrics>(byProfile);
}

}  // namespace csp::reduce
