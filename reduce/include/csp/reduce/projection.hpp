// Projection of one thread's raw CCT onto the canonical CCT, and the thread's exclusive and
// inclusive values there (docs/design.md, "Data model"; thesis Eq. 7.3, 7.4).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "csp/reduce/attribution.hpp"
#include "csp/reduce/canonical_cct.hpp"
#include "csp/storage/profile.hpp"
#include "csp/storage/profile_blocks.hpp"

namespace csp::reduce {

// One raw value moved to its canonical statement: value = count x period (a real-valued
// metric's value: its bit pattern, ValueType::Real).
struct StmtValue {
  std::uint32_t node;
  std::uint16_t metric;
  std::uint64_t value;
};

// Step function: the canonical child of `parent` with `key` (inserting or looking up).
using CctStep = std::function<std::uint32_t(std::uint32_t parent, const ScopeKey& key)>;

struct ProjectionContext {
  const PerfMap* jit = nullptr;               // the process's JIT symbols (perf map), if any
  std::uint64_t* truncatedSamples = nullptr;  // out: samples of sampled metrics on truncated paths
  // out: samples of sampled metrics whose path goes through frames without unwind tables (the
  // measurement scanned the stack above them), and those of them whose path the unwind recipes
  // completed
  std::uint64_t* scannedSamples = nullptr;
  std::uint64_t* recoveredSamples = nullptr;
  // OpenMP: the native paths of samples in parallel regions and tasks (csp-prof-mpi --physical)
  // instead of their logical ones (logical.hpp).
  bool physical = false;
};

// Walks the profile's raw CCT (its logical call paths stitched first, logical.hpp), turning frames into typed scopes
// (symbolic frames directly, address frames through the attributor) and calling `step` for each canonical edge. Returns
// the profile's values at their canonical statements, in raw order.
//
// Address paths are checked for completeness (docs/postprocessing.md, "Path quality"): a path
// whose outermost frame does not start a stack (Attributor::startsPath), and the part of a path
// inside a frame outside every module (not named by the perf map), go below the root-level
// procedure kTruncatedPathsName; their samples are counted in `truncatedSamples`. Where the
// profile marks its path starts (RawCct::pathStart, other formats), a Partial path goes there
// too and a Complete or Placeholder one stays at the root, whatever the binaries say; a
// placeholder's procedure frame gets the module kPlaceholderModuleName. Where the
// measurement stopped at a frame without unwind tables and scanned the stack above it
// (storage UnwindNote), the frame's unwind recipe (Attributor::frameRule) picks the candidate
// that holds its return address, and so on until the frame where unwinding resumed: the path
// goes on there, or, if the recipes do not lead to it, it is truncated after the frames found.
// Candidates that are not frames are dropped.
std::vector<StmtValue> projectProfile(const ThreadProfile& profile, StringTable& strings, Attributor& attributor,
                                      const CctStep& step, const ProjectionContext& context = {});

// The allocator of ThreadValues' rows: std::allocator, except that an element made without a
// value is left uninitialized (trivial types only), so that resize() makes room for rows that are
// then written in place without first zero-filling them (ValueScratch::collect: every profile's
// values, 24 bytes per node and metric).
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  using std::allocator<T>::allocator;
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  template <typename U>
  void construct(U* at) noexcept {
    ::new (static_cast<void*>(at)) U;  // default-initialized: no value
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
};

// One node's values of one metric in a thread. Values of real-valued metrics are bit patterns of
// doubles (ValueType::Real).
struct ThreadValue {
  std::uint32_t node;
  std::uint16_t metric;
  std::uint64_t exclusive;
  std::uint64_t inclusive;
  bool operator==(const ThreadValue&) const = default;
};

// Per-thread exclusive and inclusive values at canonical nodes, sorted by (node, metric).
// Nodes with both values zero are absent; the root carries the thread's totals as inclusive.
// Rows, not a column per field: the by-node writer reads a batch's profiles side by side, one
// cursor each, and a row is one stream per profile for the cores' prefetchers instead of four.
struct ThreadValues {
  std::vector<ThreadValue, UninitializedAllocator<ThreadValue>> rows;
  // The same values encoded for the values by profile as they were collected, when a sink asked
  // for it (Pipeline::encodeValuesByProfile); `made` false otherwise.
  storage::ProfileBlocks byProfile;
  std::size_t size() const { return rows.size(); }
};

// Reusable per-worker scratch space for the per-thread values (dense over nodes x metrics, reset
// through a bitmap of touched nodes, so a profile costs time proportional to its own size plus a
// scan of one bit per canonical node). `real[m]`: metric m is real-valued, its values added as
// doubles (in the profile's order, so the same profile gives the same bits); the others are added
// as integers.
class ValueScratch {
 public:
  ValueScratch(std::size_t nodes, std::vector<bool> real);
  // `byProfile`: also encode the values by profile, node by node as they are collected (its
  // metrics are this scratch's).
  ThreadValues compute(const FinalCct& cct, const std::vector<StmtValue>& values,
                       storage::ProfileBlockEncoder* byProfile = nullptr);

 private:
  // The passes come in two forms: with real-valued metrics among the metrics, and without (then
  // every value is added as an integer, with no test per value).
  template <bool AnyReal>
  void add(std::uint64_t& into, std::size_t metric, std::uint64_t value) const {
    into = AnyReal && real_[metric] ? realBits(realValue(into) + realValue(value)) : into + value;
  }
  void learnStaticScopes(const FinalCct& cct);
  template <std::size_t Metrics>
  ThreadValues compute(const std::vector<StmtValue>& values, storage::ProfileBlockEncoder* byProfile);
  template <bool AnyReal, std::size_t Metrics>
  void addStatements(const std::vector<StmtValue>& values);
  template <bool AnyReal, std::size_t Metrics>
  void propagateInclusive();
  template <std::size_t Metrics>
  ThreadValues collect(storage::ProfileBlockEncoder* byProfile);
  template <std::size_t Metrics, typename PerNode>
  ThreadValues gather(PerNode&& perNode);
  std::size_t metrics_;
  std::vector<std::uint8_t> real_;
  bool anyReal_ = false;
  std::vector<std::uint64_t> exclusive_;
  std::vector<std::uint64_t> inclusive_;
  std::vector<std::uint64_t> touched_;  // bit per node
  std::size_t touchedCount_ = 0;
  // Per node, the static scopes that count its statement values as exclusive: its parent when
  // that is a Loop or Alien, and its nearest ProcFrame above it (kNoIndex: none).
  std::vector<std::uint32_t> loopParent_, proc_;
  // Per node, its parent: a copy narrower than the CCT's nodes, so that the walks towards the
  // root of addStatements and propagateInclusive stay in cache.
  std::vector<std::uint32_t> parent_;
};

}  // namespace csp::reduce
