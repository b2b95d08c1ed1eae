// The one JSON dumper of views/: every JSON answer (views, drill-downs, info, queries, scaling
// loss, imbalance causes) is written through it.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace csp::views::detail {

// Names come from binaries, users and programs' region names: not always UTF-8. Invalid bytes
// become U+FFFD instead of failing the export (docs/views.md, "Exports"); text and CSV keep the
// bytes. Object keys are in sorted order (nlohmann::json), the same whatever order a renderer
// builds them in. `indent` as nlohmann's dump (-1: one line).
inline std::string dumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A real, or null where it is undefined (NaN).
inline nlohmann::json jsonNumber(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace csp::views::detail
