// Renderers of the memory-access profile answers (csp-views --cost, --growth, --footprint;
// docs/memory-profiles.md): text for people, JSON for programs and the web viewer's plots.
#pragma once

#include <ostream>
#include <string>
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

// One memory-profile answer, as csp-views --cost/--growth/--footprint/--interleaving and the web
// viewer's /api/cost, growth, footprint and interleaving ask for it.
struct MemoryRequest {
  std::string cost;  // the routine of --cost
  bool growth = false, footprint = false, interleaving = false;
  metrics::memory::SizeKind size = metrics::memory::SizeKind::Trms;
  metrics::memory::CostMetric costMetric = metrics::memory::CostMetric::Instructions;
  std::size_t minSizes = 4;
};

// Computes and renders the answer; ViewError (one line) when there is none: not exactly one
// question, no routine of that name, no time values for --cost-metric time.
void renderMemory(const storage::Database& db, const MemoryRequest& r, Format format, std::ostream& out);

}  // namespace csp::views
