// Exclusive and inclusive values of one profile over a typed tree (DESIGN.md 3.3; thesis
// Eq. 7.3, 7.4 and Fig. 7.5). Per profile only: across profiles E and I must each be
// accumulated from these per-profile values, never derived from one another (thesis Fig. 7.6).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "csp/storage/profile.hpp"  // ScopeKind

namespace csp::metrics {

struct ExclusiveInclusive {
  std::vector<std::uint64_t> exclusive;
  std::vector<std::uint64_t> inclusive;
};

// Node 0 is the root; parent[i] < i for i > 0 (parents before children), parent[0] is ignored.
// `raw` holds the measured values, normally on Stmt leaves only. Rules:
//   ProcFrame   E = raw + every Stmt descendant reached without crossing a CallSite
//                   (through its Loop and Alien scopes)
//   Loop, Alien E = raw + Stmt children
//   CallSite, Stmt, Root   E = raw
//   every node  I = raw + sum of the children's I (the sum of raw values in the subtree)
// Throws std::invalid_argument on mismatched sizes or a parent that does not precede its child.
// Unsigned wrap-around is not checked: a single profile's values summed stay far below 2^64.
ExclusiveInclusive propagate(std::span<const std::uint32_t> parent, std::span<const ScopeKind> kind,
                             std::span<const std::uint64_t> raw);

}  // namespace csp::metrics
