// Floating-point command-line options: CLI11's Range and PositiveNumber let NaN through (every
// comparison with it is false) and std::stod reads "nan" and "inf", so a NaN threshold reached
// the code behind it (csp-views --cluster-threshold nan spun forever). Every floating-point
// option of the tools is checked here (docs/cli.md, "Numbers").
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

namespace csp::cli {

// The whole text as a finite number (no NaN, no infinity, nothing after it).
inline std::optional<double> parseFinite(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The reason `text` is not a finite number in [lo, hi], or "" when it is.
inline std::string finiteRangeError(const std::string& text, double lo, double hi) {
  const auto v = parseFinite(text);
  if (!v) return fmt::format("'{}' is not a finite number", text);
  if (*v < lo || *v > hi) {
    if (hi == std::numeric_limits<double>::max()) return fmt::format("{} is not at least {}", text, lo);
    return fmt::format("{} is not in [{}, {}]", text, lo, hi);
  }
  return {};
}

// A finite number in [lo, hi] (hi defaults to no upper bound).
inline CLI::Validator finiteRange(double lo, double hi = std::numeric_limits<double>::max()) {
  return CLI::Validator([lo, hi](std::string& text) { return finiteRangeError(text, lo, hi); },
                        hi == std::numeric_limits<double>::max() ? fmt::format("NUMBER >= {}", lo)
                                                                 : fmt::format("NUMBER in [{}, {}]", lo, hi),
                        "FINITE");
}

// A finite number greater than 0.
inline CLI::Validator positiveFinite() {
  return CLI::Validator(
      [](std::string& text) {
        const auto v = parseFinite(text);
        if (!v) return fmt::format("'{}' is not a finite number", text);
        return *v > 0 ? std::string() : fmt::format("{} is not positive", text);
      },
      "NUMBER > 0", "POSITIVE_FINITE");
}

}  // namespace csp::cli
