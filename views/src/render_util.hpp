// Helpers shared by the renderers.
#pragma once

#include <string>

#include "model.hpp"

namespace csp::views {

// Compact number for a terminal column: integers as they are up to a million, then 3 significant
// digits with an SI suffix; ratios with two decimals; NaN blank.
std::string formatNumber(double value, Statistic statistic);

}  // namespace csp::views
