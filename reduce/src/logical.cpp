// OpenMP logical call paths: the rewrite of a profile's raw CCT (logical.hpp).
#include "csp/reduce/logical.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "csp/reduce/overhead.hpp"

namespace csp::reduce {

namespace {

// The OpenMP runtimes' own code: LLVM's and Intel's (__kmp_*, __kmpc_*), GCC's (GOMP_*).
bool isRuntimeModule(const std::string& path) {
  const std::string name = baseName(path);
  for (const char* prefix : {"libomp.so", "libiomp5.so", "libgomp.so", "libgomp-"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// System libraries that the runtime calls (sched_yield, futex waits in the C library, the vDSO):
// called from runtime code they are the runtime's, not a body's start (OverheadRules' transparent
// modules).
bool isSystemModule(const std::string& path) {
  const std::string name = baseName(path);
  for (const auto& pattern : OverheadRules::transparentModules())
    if (::fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

class Stitcher {
 public:
  Stitcher(const ThreadProfile& in, bool logical) : in_(in), logical_(logical), out_(in) {
    out_.cct = {};
    out_.values = {};
    out_.logical = {};
    out_.cct.parent.push_back(kNoIndex);
    out_.cct.frame.push_back(kNoIndex);
    out_.cct.unwindNote.push_back(0);
    for (const auto& m : in.modules) {
      runtimeModule_.push_back(isRuntimeModule(m.path));
      systemModule_.push_back(isSystemModule(m.path));
      markerModule_.push_back(m.path == kLogicalContextModule);
    }
    contextRuntime_.assign(in.logical.size(), kNoIndex);
  }

  ThreadProfile run() {
    const std::size_t n = in_.cct.size();
    pos_.assign(n, 0);
    context_.assign(n, kNone);
    inBody_.assign(n, 0);
    runtimeSide_.assign(n, 0);
    for (std::size_t i = 1; i < n; ++i) place(static_cast<std::uint32_t>(i));
    moveValues();
    if (std::all_of(out_.cct.unwindNote.begin(), out_.cct.unwindNote.end(), [](auto v) { return v == 0; }))
      out_.cct.unwindNote.clear();
    return std::move(out_);
  }

 private:
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};

  const AddressFrame& frameOf(std::uint32_t raw) const { return in_.addressFrames[in_.cct.frame[raw]]; }
  bool isMarker(std::uint32_t raw) const { return raw != 0 && markerModule_[frameOf(raw).module]; }
  bool isRuntime(std::uint32_t raw) const { return raw != 0 && runtimeModule_[frameOf(raw).module]; }
  bool isSystem(std::uint32_t raw) const { return raw != 0 && systemModule_[frameOf(raw).module]; }

  // The new child of `parent` naming `frame` (with `note`), created on first use.
  std::uint32_t node(std::uint32_t parent, std::uint32_t frame, std::uint32_t note = 0) {
    auto [it, inserted] = nodes_.try_emplace({parent, frame, note}, static_cast<std::uint32_t>(out_.cct.size()));
    if (inserted) {
      out_.cct.parent.push_back(parent);
      out_.cct.frame.push_back(frame);
      out_.cct.unwindNote.push_back(note);
    }
    return it->second;
  }

  std::uint32_t runtimeFrame() {
    if (runtimeFrame_ == kNoIndex) {
      runtimeFrame_ = static_cast<std::uint32_t>(out_.addressFrames.size());
      out_.addressFrames.push_back({static_cast<std::uint32_t>(out_.modules.size()), 0});
      out_.modules.push_back({kOmpRuntimeName, {}, 0, 0, 0});
    }
    return runtimeFrame_;
  }

  // The [omp runtime] node of context `c` (kPoolMarker: the pool's, at the root): below the
  // creator's context's own, the creator's frames.
  std::uint32_t contextRuntime(std::uint64_t c) {
    if (c >= in_.logical.size()) return node(0, runtimeFrame());
    if (contextRuntime_[c] != kNoIndex) return contextRuntime_[c];
    const std::uint32_t creator = in_.logical.parent[c];
    std::uint32_t at = creator == kNoIndex ? 0 : contextRuntime(creator);
    for (std::uint32_t k = in_.logical.pathBegin[c]; k < in_.logical.pathBegin[c + 1]; ++k)
      at = node(at, in_.logical.pathFrame[k]);
    return contextRuntime_[c] = node(at, runtimeFrame());
  }

  // Below a marker: the frames before the body fold into the context's [omp runtime]; a program
  // frame called by the runtime starts a body (again, for a task run at a scheduling point inside
  // another body: the marker names the innermost).
  void place(std::uint32_t i) {
    const std::uint32_t parent = in_.cct.parent[i];
    const std::uint32_t note = in_.cct.unwindNote.empty() ? 0 : in_.cct.unwindNote[i];
    if (parent == 0 && isMarker(i)) {
      context_[i] = frameOf(i).offset;
      pos_[i] = logical_ ? contextRuntime(context_[i]) : 0;
      return;
    }
    context_[i] = context_[parent];
    if (context_[i] == kNone || !logical_) {
      pos_[i] = node(pos_[parent], in_.cct.frame[i], note);
      return;
    }
    runtimeSide_[i] = isRuntime(i) || (isSystem(i) && runtimeSide_[parent]);
    const bool starts = !runtimeSide_[i] && runtimeSide_[parent];
    if (starts || inBody_[parent]) {
      pos_[i] = node(starts ? contextRuntime(context_[i]) : pos_[parent], in_.cct.frame[i], note);
      inBody_[i] = 1;
    } else {
      pos_[i] = pos_[parent];  // folded
    }
  }

  // Values of raw nodes that fold together add up (doubles for real-valued metrics).
  void moveValues() {
    std::map<std::pair<std::uint32_t, std::uint16_t>, std::uint64_t> sums;
    for (std::size_t v = 0; v < in_.values.size(); ++v) {
      const auto metric = in_.values.metric[v];
      auto& sum = sums[{pos_[in_.values.node[v]], metric}];
      const std::uint64_t count = in_.values.count[v];
      sum =
          in_.metrics[metric].valueType == ValueType::Real ? realBits(realValue(sum) + realValue(count)) : sum + count;
    }
    for (const auto& [key, count] : sums) {
      if (count == 0) continue;
      out_.values.node.push_back(key.first);
      out_.values.metric.push_back(key.second);
      out_.values.count.push_back(count);
    }
  }

  const ThreadProfile& in_;
  const bool logical_;
  ThreadProfile out_;
  std::vector<bool> runtimeModule_, systemModule_, markerModule_;
  std::vector<std::uint32_t> contextRuntime_;
  std::uint32_t runtimeFrame_ = kNoIndex;
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>, std::uint32_t> nodes_;
  std::vector<std::uint32_t> pos_;
  std::vector<std::uint64_t> context_;
  std::vector<std::uint8_t> inBody_;
  std::vector<std::uint8_t> runtimeSide_;  // runtime code, or system code that runtime code called
};

}  // namespace

bool hasLogicalMarkers(const ThreadProfile& p) {
  if (p.frameKind != FrameKind::Address) return false;
  std::uint32_t marker = kNoIndex;
  for (std::size_t m = 0; m < p.modules.size(); ++m)
    if (p.modules[m].path == kLogicalContextModule) marker = static_cast<std::uint32_t>(m);
  if (marker == kNoIndex) return false;
  for (std::size_t i = 1; i < p.cct.size(); ++i)
    if (p.cct.parent[i] == 0 && p.addressFrames[p.cct.frame[i]].module == marker) return true;
  return false;
}

ThreadProfile stitchLogicalPaths(const ThreadProfile& profile, bool logical) {
  return Stitcher(profile, logical).run();
}

}  // namespace csp::reduce
