// The sampled events as CSP_EVENTS and `csp-run -e` name them (docs/measurement.md, "Events and
// settings"): one parser for libcsp-measure.so, which reads the variable, and csp-run, which
// refuses as a usage error what the library would have to ignore. Header-only and free of
// allocation: the library parses before anything else is set up.
#pragma once

#include <time.h>

#include <cstdint>
#include <string_view>

namespace csp::measure {

inline constexpr std::uint64_t kMinEventPeriodNs = 10'000;  // 100,000 samples/s: faster spends most time in the handler
inline constexpr std::uint64_t kMaxEventPeriodNs = 3'600'000'000'000;  // one sample an hour
inline constexpr std::uint64_t kMaxEventRate = 1'000'000'000 / kMinEventPeriodNs;
inline constexpr int kMaxEventCount = 4;

struct EventSpec {
  std::string_view name;  // canonical: "cpu-time" or "real-time"
  clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
  std::uint64_t periodNs = 5'000'000;  // 200 samples/s
};

namespace detail {

constexpr bool parseDecimal(std::string_view text, std::uint64_t& out) {
  if (text.empty() || text.size() > 18) return false;  // 18 digits cannot overflow 64 bits
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = v;
  return true;
}

}  // namespace detail

// Parses "NAME[@RATE]": NAME cpu-time (cpu) or real-time (real, wall); RATE samples per second
// or a period with a unit (ns, us, ms, s). Returns nullptr, or why `spec` is refused.
constexpr const char* parseEventSpec(std::string_view spec, EventSpec& e) {
  std::string_view name = spec, rate;
  if (const auto at = spec.find('@'); at != std::string_view::npos) {
    name = spec.substr(0, at);
    rate = spec.substr(at + 1);
  }
  if (name == "cpu-time" || name == "cpu")
    e = {"cpu-time", CLOCK_THREAD_CPUTIME_ID, 5'000'000};
  else if (name == "real-time" || name == "real" || name == "wall")
    e = {"real-time", CLOCK_MONOTONIC, 5'000'000};
  else
    return "unknown event (known: cpu-time, real-time, each optionally @RATE or @PERIOD)";
  if (spec.find('@') == std::string_view::npos) return nullptr;
  constexpr struct {
    std::string_view suffix;
    std::uint64_t ns;
  } kUnits[] = {{"ns", 1}, {"us", 1'000}, {"ms", 1'000'000}, {"s", 1'000'000'000}};
  std::uint64_t value = 0;
  for (const auto& u : kUnits) {
    if (rate.size() <= u.suffix.size() || !rate.ends_with(u.suffix)) continue;
    if (!detail::parseDecimal(rate.substr(0, rate.size() - u.suffix.size()), value))
      return "the period is not a whole number (up to 18 digits) with a unit ns, us, ms or s";
    if (value < (kMinEventPeriodNs + u.ns - 1) / u.ns)
      return "the period is shorter than 10us (at most 100000 samples/s)";
    if (value > kMaxEventPeriodNs / u.ns) return "the period is longer than 3600s";
    e.periodNs = value * u.ns;
    return nullptr;
  }
  if (!detail::parseDecimal(rate, value)) return "expected a rate in samples/s or a period with a unit ns, us, ms or s";
  if (value == 0) return "the rate is 0 samples/s";
  if (value > kMaxEventRate) return "the rate is above 100000 samples/s";
  e.periodNs = 1'000'000'000u / value;
  return nullptr;
}

}  // namespace csp::measure
