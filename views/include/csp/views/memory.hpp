// Renderers of the memory-access profile answers (csp-views --cost, --growth, --footprint;
// docs/memory-profiles.md): text for people, JSON for programs and the web viewer's plots.
#pragma once

#include <ostream>
#include <vector>

#include "csp/analysis/memory.hpp"
#include "csp/views/request.hpp"

namespace csp::views {

// Format::Text or Format::Json; anything else throws std::invalid_argument.
void renderCostFunction(const analysis::CostFunction& f, Format format, std::ostream& out);
void renderGrowthRanking(const std::vector<analysis::CostFunction>& ranking, Format format, std::ostream& out);
// `interleaving`: the curves are analysis::interleavingCurves' (values: accesses, not blocks).
void renderFootprint(const analysis::FootprintCurves& curves, Format format, std::ostream& out,
                     bool interleaving = false);

}  // namespace csp::views
