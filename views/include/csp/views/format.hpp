// Text forms of the exports shared by the tools' renderers (csp-views, csp-query): one CSV
// quoter and one number printer, so that the formats cannot drift apart.
#pragma once

#include <string>

namespace csp::views {

// One CSV field (RFC 4180): as it is, or in double quotes with each quote doubled when it holds
// a comma, a quote, a CR or a LF.
std::string csvField(const std::string& text);

// A real for CSV: the shortest text that reads back as the same double (integral values without
// a fraction or exponent up to 2^53, then as fmt prints them); NaN gives "".
std::string csvNumber(double value);

}  // namespace csp::views
