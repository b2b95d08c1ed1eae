// Exclusive and inclusive values of one profile over a typed tree (docs/design.md, "Data model"; thesis
// Eq. 7.3, 7.4 and Fig. 7.5). Per profile only: across profiles E and I must each be
// accumulated from these per-profile values, never derived from one another (thesis Fig. 7.6).
//
// Rules, for raw values normally on Stmt leaves:
//   ProcFrame   E = raw + every Stmt descendant reached without crossing a CallSite
//                   (through its Loop and Alien scopes)
//   Loop, Alien E = raw + Stmt children
//   CallSite, Stmt, Root   E = raw
//   every node  I = raw + sum of the children's I (the sum of raw values in the subtree)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "csp/storage/profile.hpp"  // ScopeKind

namespace csp::metrics {

// Built once per tree (e.g. the canonical CCT) and then run for every profile without
// allocating. Node 0 is the root; parent[i] < i for i > 0 (parents before children); parent[0]
// is ignored. The constructor copies what it needs and throws std::invalid_argument on
// mismatched sizes or a parent that does not precede its child.
class Propagator {
 public:
  Propagator(std::span<const std::uint32_t> parent, std::span<const ScopeKind> kind);

  std::size_t size() const { return parent_.size(); }

  // raw, exclusive and inclusive all have size() entries (std::invalid_argument otherwise);
  // exclusive and inclusive are overwritten. Unsigned wrap-around is not checked: one profile's
  // values summed stay far below 2^64.
  void run(std::span<const std::uint64_t> raw, std::span<std::uint64_t> exclusive,
           std::span<std::uint64_t> inclusive) const;

 private:
  std::vector<std::uint32_t> parent_;
  // Where a non-zero Stmt's raw value goes besides its own E: its parent if that is a Loop or
  // Alien (else kNoIndex), and the enclosing ProcFrame reached without crossing a CallSite
  // (else kNoIndex). Precomputed per Stmt so that run() is two adds per node.
  std::vector<std::uint32_t> scopeOf_;
  std::vector<std::uint32_t> frameOf_;
};

struct ExclusiveInclusive {
  std::vector<std::uint64_t> exclusive;
  std::vector<std::uint64_t> inclusive;
};

// One-shot convenience: Propagator(parent, kind).run(raw, ...).
ExclusiveInclusive propagate(std::span<const std::uint32_t> parent, std::span<const ScopeKind> kind,
                             std::span<const std::uint64_t> raw);

}  // namespace csp::metrics
