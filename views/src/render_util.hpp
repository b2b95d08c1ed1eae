// Helpers shared by the renderers.
#pragma once

#include <string>
#include <string_view>

#include "model.hpp"

namespace csp::views {

// A number for a terminal column: ratios with two decimals, counts as integers; values of a unit
// of time ("ns") as time in the unit that reads best ("1.92 s", "35 ms"); other values as they
// are up to a million if integer, else with 3 significant digits and an SI suffix; NaN blank.
std::string formatNumber(double value, Statistic statistic, std::string_view unit = {});

}  // namespace csp::views
