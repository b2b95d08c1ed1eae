#include "csp/metrics/propagation.hpp"

#include <stdexcept>

namespace csp::metrics {

ExclusiveInclusive propagate(std::span<const std::uint32_t> parent, std::span<const ScopeKind> kind,
                             std::span<const std::uint64_t> raw) {
  const std::size_t n = parent.size();
  if (kind.size() != n || raw.size() != n)
    throw std::invalid_argument("propagate: parent, kind and raw differ in length");
  for (std::size_t i = 1; i < n; ++i)
    if (parent[i] >= i) throw std::invalid_argument("propagate: parent does not precede child");

  // frame[i]: the ProcFrame whose exclusive value a Stmt child of i feeds, i.e. i itself if it
  // is a ProcFrame, the enclosing frame of a Loop/Alien, none below a CallSite or at the root.
  // Forward pass: parents are resolved first.
  std::vector<std::uint32_t> frame(n, kNoIndex);
  for (std::size_t i = 0; i < n; ++i) {
    switch (kind[i]) {
      case ScopeKind::ProcFrame: frame[i] = static_cast<std::uint32_t>(i); break;
      case ScopeKind::Loop:
      case ScopeKind::Alien: frame[i] = i == 0 ? kNoIndex : frame[parent[i]]; break;
      default: frame[i] = kNoIndex; break;
    }
  }

  ExclusiveInclusive out{std::vector<std::uint64_t>(raw.begin(), raw.end()),
                         std::vector<std::uint64_t>(raw.begin(), raw.end())};
  for (std::size_t i = n; i-- > 1;) {
    const std::uint32_t p = parent[i];
    out.inclusive[p] += out.inclusive[i];
    if (kind[i] != ScopeKind::Stmt || raw[i] == 0) continue;
    if (kind[p] == ScopeKind::Loop || kind[p] == ScopeKind::Alien) out.exclusive[p] += raw[i];
    // A Stmt directly under a ProcFrame: p is its own frame and is counted once here.
    if (frame[p] != kNoIndex) out.exclusive[frame[p]] += raw[i];
  }
  return out;
}

}  // namespace csp::metrics
