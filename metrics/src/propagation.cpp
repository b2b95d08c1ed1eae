#include "csp/metrics/propagation.hpp"

#include <algorithm>
#include <stdexcept>

namespace csp::metrics {

Propagator::Propagator(std::span<const std::uint32_t> parent, std::span<const ScopeKind> kind)
    : parent_(parent.begin(), parent.end()), scopeOf_(parent.size(), kNoIndex), frameOf_(parent.size(), kNoIndex) {
  const std::size_t n = parent.size();
  if (kind.size() != n) throw std::invalid_argument("propagate: parent and kind differ in length");
  for (std::size_t i = 1; i < n; ++i)
    if (parent[i] >= i) throw std::invalid_argument("propagate: parent does not precede child");

  // frame[i]: the ProcFrame whose E a Stmt child of i feeds: i itself for a ProcFrame, the
  // enclosing one for a Loop/Alien, none below a CallSite or at the root. Parents come first,
  // so one forward pass resolves it.
  std::vector<std::uint32_t> frame(n, kNoIndex);
  for (std::size_t i = 0; i < n; ++i) {
    switch (kind[i]) {
      case ScopeKind::ProcFrame:
        frame[i] = static_cast<std::uint32_t>(i);
        break;
      case ScopeKind::Loop:
      case ScopeKind::Alien:
        frame[i] = i == 0 ? kNoIndex : frame[parent[i]];
        break;
      default:
        break;
    }
    if (i == 0 || kind[i] != ScopeKind::Stmt) continue;
    const std::uint32_t p = parent[i];
    if (kind[p] == ScopeKind::Loop || kind[p] == ScopeKind::Alien) scopeOf_[i] = p;
    frameOf_[i] = frame[p];  // for a Stmt directly in a ProcFrame, that frame
  }
}

void Propagator::run(std::span<const std::uint64_t> raw, std::span<std::uint64_t> exclusive,
                     std::span<std::uint64_t> inclusive) const {
  const std::size_t n = parent_.size();
  if (raw.size() != n || exclusive.size() != n || inclusive.size() != n)
    throw std::invalid_argument("propagate: value arrays do not match the tree");
  std::copy(raw.begin(), raw.end(), exclusive.begin());
  std::copy(raw.begin(), raw.end(), inclusive.begin());
  for (std::size_t i = n; i-- > 1;) {
    inclusive[parent_[i]] += inclusive[i];
    const std::uint64_t v = raw[i];
    if (v == 0) continue;
    if (scopeOf_[i] != kNoIndex) exclusive[scopeOf_[i]] += v;
    if (frameOf_[i] != kNoIndex) exclusive[frameOf_[i]] += v;
  }
}

ExclusiveInclusive propagate(std::span<const std::uint32_t> parent, std::span<const ScopeKind> kind,
                             std::span<const std::uint64_t> raw) {
  const Propagator propagator(parent, kind);
  ExclusiveInclusive out{std::vector<std::uint64_t>(raw.size()), std::vector<std::uint64_t>(raw.size())};
  propagator.run(raw, out.exclusive, out.inclusive);
  return out;
}

}  // namespace csp::metrics
