// Timestamps of one process on the reference process's clock, as guaranteed intervals
// (Benavides, ch. 5, FreeZER; docs/postprocessing.md "Clocks across processes").
//
// A process's ClockSync holds, at MPI initialisation and at finalisation, a local reading x_k
// trapped between two reference readings [a_k, b_k]. If both clocks run at constant rates, the
// reference time of a local reading L lies on a line through both boxes, so it lies between
//   c0 * (c0 >= 0 ? a0 : b0) + c1 * (c1 >= 0 ? a1 : b1)   and   the same with a and b swapped,
// where c1 = (L - x0) / (x1 - x0) and c0 = 1 - c1: interpolation between the two zeros, and
// extrapolation (wider) before the first and after the second. The relative frequency lies in
// [(a1 - b0) / (x1 - x0), (b1 - a0) / (x1 - x0)] (Eq. 5.2-5.3). A process on the reference's
// clock converts exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "csp/storage/profile.hpp"

namespace csp::storage {

struct TimeInterval {
  std::uint64_t lo = 0, hi = 0;  // reference-clock ns, lo <= hi
  std::uint64_t width() const { return hi - lo; }
  bool operator==(const TimeInterval&) const = default;
};

// With only the first zero (MPI_Finalize never ran) the frequency is unknown: csp assumes the
// clocks' rates differ by at most this much. Not guaranteed: the results then say so.
inline constexpr double kAssumedDriftPpm = 500;

inline bool hasClock(const ClockSync& c) { return c.state != ClockState::None; }
// Guaranteed (not assumed) bounds: no InitOnly.
inline bool clockGuaranteed(const ClockSync& c) {
  return c.state == ClockState::Reference || c.state == ClockState::SameClock || c.state == ClockState::Measured;
}

struct FrequencyBounds {
  double lo = 1, hi = 1;
};
inline FrequencyBounds relativeFrequency(const ClockSync& c) {
  if (c.state == ClockState::Measured) {
    const long double span = static_cast<long double>(c.finalLocalNs - c.initLocalNs);
    return {static_cast<double>((static_cast<long double>(c.finalRefLoNs) - c.initRefHiNs) / span),
            static_cast<double>((static_cast<long double>(c.finalRefHiNs) - c.initRefLoNs) / span)};
  }
  if (c.state == ClockState::InitOnly) return {1 - kAssumedDriftPpm * 1e-6, 1 + kAssumedDriftPpm * 1e-6};
  return {};
}

// The reference time of local reading `local`; nullopt without clock data.
inline std::optional<TimeInterval> toReference(const ClockSync& c, std::uint64_t local) {
  using LD = long double;
  if (c.state == ClockState::Reference || c.state == ClockState::SameClock) return TimeInterval{local, local};
  LD lo = 0, hi = 0;
  if (c.state == ClockState::Measured) {
    const LD c1 = (static_cast<LD>(local) - c.initLocalNs) / (static_cast<LD>(c.finalLocalNs) - c.initLocalNs);
    const LD c0 = 1 - c1;
    lo = c0 * (c0 >= 0 ? c.initRefLoNs : c.initRefHiNs) + c1 * (c1 >= 0 ? c.finalRefLoNs : c.finalRefHiNs);
    hi = c0 * (c0 >= 0 ? c.initRefHiNs : c.initRefLoNs) + c1 * (c1 >= 0 ? c.finalRefHiNs : c.finalRefLoNs);
  } else if (c.state == ClockState::InitOnly) {
    const LD d = static_cast<LD>(local) - c.initLocalNs;
    const LD f = kAssumedDriftPpm * 1e-6L;
    lo = c.initRefLoNs + d * (d >= 0 ? 1 - f : 1 + f);
    hi = c.initRefHiNs + d * (d >= 0 ? 1 + f : 1 - f);
  } else {
    return std::nullopt;
  }
  // One ns outward for the rounding of long double arithmetic.
  const LD l = std::floor(lo) - 1, h = std::ceil(hi) + 1;
  return TimeInterval{l > 0 ? static_cast<std::uint64_t>(l) : 0, h > 0 ? static_cast<std::uint64_t>(h) : 0};
}

}  // namespace csp::storage
