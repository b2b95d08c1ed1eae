// The shared text forms of numbers and CSV fields (format.hpp).
#include "csp/views/format.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "csp/metrics/accumulator.hpp"

namespace csp::views {

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csvNumber(double v) {
  if (std::isnan(v)) return "";
  if (std::fabs(v) <= 0x1p53 && v == std::trunc(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

std::string formatNumber(double v, metrics::Statistic s, std::string_view unit) {
  using metrics::Statistic;
  if (std::isnan(v)) return "";
  if (s == Statistic::Count) return fmt::format("{}", static_cast<std::uint64_t>(v));
  if (s == Statistic::Cfvar || s == Statistic::Imbalance || s == Statistic::ImbalanceMedian)
    return fmt::format("{:.2f}", v);
  if (unit == "ns") return metrics::formatQuantity(v, unit);
  const double a = std::fabs(v);
  if (a == std::floor(a) && a < 1e6) return fmt::format("{}", static_cast<std::int64_t>(v));
  return metrics::compactNumber(v);
}

}  // namespace csp::views
