// Text forms shared by every renderer of every tool (csp-views, csp-query, csp-diff): one CSV
// quoter and one printer of numbers for CSV and for terminals, so that the formats cannot drift
// apart. (The one JSON dumper is internal to views/: every JSON answer is written there.)
#pragma once

#include <string>
#include <string_view>

#include "csp/metrics/accumulator.hpp"

namespace csp::views {

// One CSV field (RFC 4180): as it is, or in double quotes with each quote doubled when it holds
// a comma, a quote, a CR or a LF.
std::string csvField(const std::string& text);

// A real for CSV: the shortest text that reads back as the same double (integral values without
// a fraction or exponent up to 2^53, then as fmt prints them); NaN gives "".
std::string csvNumber(double value);

// A number for a terminal column: ratios with two decimals, counts as integers; values of a unit
// of time ("ns") as time in the unit that reads best ("1.92 s", "35 ms"); other values as they
// are up to a million if integer, else with 3 significant digits and an SI suffix; NaN blank.
std::string formatNumber(double value, metrics::Statistic statistic, std::string_view unit = {});

}  // namespace csp::views
