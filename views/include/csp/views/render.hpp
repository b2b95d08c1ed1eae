// Renderers of every answer of the presentation layer (views.hpp, answers.hpp): the one place
// where CSP's tools print. Text for terminals; CSV, JSON, folded stacks and speedscope for other
// programs. Every answer has a JSON form, which is all a web server sends.
#pragma once

#include <iosfwd>
#include <string>

#include "csp/analysis/imbalance.hpp"
#include "csp/views/answers.hpp"
#include "csp/views/request.hpp"
#include "csp/views/session.hpp"
#include "csp/views/views.hpp"

namespace csp::views {

struct TextOptions {
  bool color = false;
  bool bounds = false;     // show each value's sampling-error bound (±)
  bool fullNames = false;  // no shortening of long (C++) names
  std::size_t nameWidth = 72;
};

// Any answer in a format. ViewError for a format the answer has not: trees have every format
// (folded stacks and speedscope only for Calling Context and Regions), drill-downs and query
// answers text, CSV and JSON, the rest text and JSON. `title` names a speedscope profile.
void render(const Answer& answer, Format format, std::ostream& out, const TextOptions& text = {},
            const std::string& title = {});

// --- view trees ---------------------------------------------------------------------------------
void renderText(const ViewTree& tree, std::ostream& out, const TextOptions& options);
void renderCsv(const ViewTree& tree, std::ostream& out);
void renderJson(const ViewTree& tree, std::ostream& out);
// Flame-graph input: one line "frame;frame;... value" per stack, value = the first column's
// self cost (inclusive sum minus the shown children's). Calling Context and Regions only.
void renderFolded(const ViewTree& tree, std::ostream& out);
void renderSpeedscope(const ViewTree& tree, std::ostream& out, const std::string& title);

// --- a node per thread --------------------------------------------------------------------------
void renderDistributionText(const Distribution& d, std::ostream& out, const TextOptions& options);
void renderDistributionCsv(const Distribution& d, std::ostream& out);
void renderDistributionJson(const Distribution& d, std::ostream& out);

// --- the experiment -----------------------------------------------------------------------------
void renderInfoText(const DatabaseInfo& info, std::ostream& out);
void renderInfoJson(const DatabaseInfo& info, std::ostream& out);

// --- load-imbalance causes (analysis/imbalance.hpp) ---------------------------------------------
void renderImbalanceText(const analysis::ImbalanceReport& report, std::ostream& out);
void renderImbalanceJson(const analysis::ImbalanceReport& report, std::ostream& out);

// --- scaling loss (csp-diff; docs/diff.md "Report") ---------------------------------------------
void renderDiffText(const DiffReport& report, std::ostream& out);
void renderDiffJson(const DiffReport& report, std::ostream& out);

// --- concurrency queries (csp-query; docs/query.md "Output") -------------------------------------
void renderQueryText(const QueryAnswer& answer, std::ostream& out);
void renderQueryCsv(const QueryAnswer& answer, std::ostream& out);
void renderQueryJson(const QueryAnswer& answer, std::ostream& out);
// csp-query --list-canned: every canned analysis with its arguments and description.
void renderCannedList(std::ostream& out);

// Shortens a demangled name for a terminal: template arguments and parameter lists collapse to
// "<…>" and "(…)", and what is still too long loses its middle.
std::string shortenName(const std::string& name, std::size_t width);

}  // namespace csp::views
