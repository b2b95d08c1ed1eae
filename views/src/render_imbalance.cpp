// Text and JSON of an imbalance report (csp-views --imbalance): the analysis' data
// (analysis/imbalance.hpp), printed.
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "csp/metrics/accumulator.hpp"
#include "csp/views/render.hpp"
#include "json.hpp"

namespace csp::views {

using analysis::ImbalanceReport;
using analysis::SlowThread;

namespace {

std::string number(double v, std::string_view unit) { return metrics::formatQuantity(v, unit); }

// The tail of a call path for a terminal line: its last three procedures, parameter lists
// collapsed ("…/main/run_sample(...)/scan_items"); JSON has the whole path.
std::string shortPath(const std::string& path) {
  std::vector<std::string> names;
  std::size_t at = 0;
  int depth = 0;
  std::string name;
  for (; at < path.size(); ++at) {
    const char ch = path[at];
    if (ch == '(' && depth++ == 0) name += "(...)";
    if (depth == 0 && ch == '/') {
      names.push_back(std::move(name));
      name.clear();
      continue;
    }
    if (depth == 0) name += ch;
    if (ch == ')' && depth > 0) --depth;
  }
  names.push_back(std::move(name));
  std::string out = names.size() > 3 ? "…" : "";
  for (std::size_t i = names.size() > 3 ? names.size() - 3 : 0; i < names.size(); ++i)
    out += (out.empty() ? "" : "/") + names[i];
  return out;
}

}  // namespace

void renderImbalanceText(const ImbalanceReport& r, std::ostream& out) {
  if (r.sectionMeasure == "inclusive")
    out << fmt::format("load imbalance in {}: {} inclusive over {} threads ({})\n", r.section, r.metric, r.threads,
                       r.threadsLabel);
  else
    out << fmt::format("load imbalance in {}: {} over {} threads ({}); contexts by {}\n", r.section, r.sectionMeasure,
                       r.threads, r.threadsLabel, r.metric);
  for (const auto& note : r.notes) out << "  note: " << note << "\n";
  out << fmt::format("  per thread: mean {}, max {}, stddev {}; max/mean {:.2f}", number(r.mean, r.unit),
                     number(r.max, r.unit), number(r.stddev, r.unit), r.imbalance);
  if (r.samplingError > 0) out << fmt::format("; sampling error ±{} per thread", number(r.samplingError, r.unit));
  out << "\n";
  if (!r.slowest.empty()) {
    out << "  slowest threads (above mean + stddev):";
    for (const auto& s : r.slowest) out << fmt::format(" {} ({})", s.who, number(s.value, r.unit));
    out << "\n";
  }
  if (r.contextsInSection > 0 || r.contextsAnalysed > 0) {
    out << fmt::format("  contexts analysed: {} of {} in the section; {} procedures, loops and inlined scopes tested",
                       r.contextsAnalysed, r.contextsInSection, r.scopesTested);
    out << "\n";
  }
  out << "  " << r.verdictText << "\n";
  if (r.causes.empty()) return;
  out << fmt::format("{:>4} {:>7} {:>6} {:>8}  {}\n", "rank", "share", "corr", "p", "cause");
  const std::string indent(30, ' ');
  for (std::size_t i = 0; i < r.causes.size(); ++i) {
    const auto& c = r.causes[i];
    out << fmt::format("{:>4} {:>6.1f}% {:>6.2f} {:>8.2g}  {}  [{}]  #{}\n", i + 1, 100 * c.share, c.correlation,
                       c.pValue, c.label, shortPath(c.path), c.context);
    if (c.entry != c.context) out << fmt::format("{}enters at: {}  #{}\n", indent, c.entryLabel, c.entry);
    if (c.focus != c.context) out << fmt::format("{}hottest line: {}  #{}\n", indent, c.focusLabel, c.focus);
    for (const auto& site : c.sites)
      out << fmt::format("{}same pattern: {}  [{}] ({:.1f}%)  #{}\n", indent, site.label, shortPath(site.path),
                         100 * site.share, site.context);
    out << fmt::format("{}own cost per thread: mean {}, max {}; most in", indent, number(c.mean, r.unit),
                       number(c.max, r.unit));
    for (std::size_t k = 0; k < std::min<std::size_t>(c.threads.size(), 3); ++k)
      out << fmt::format("{} {} ({})", k ? "," : "", c.threads[k].who, number(c.threads[k].value, r.unit));
    out << "\n";
  }
}

void renderImbalanceJson(const ImbalanceReport& r, std::ostream& out) {
  using Json = nlohmann::json;
  auto threads = [](const std::vector<SlowThread>& list) {
    Json a = Json::array();
    for (const auto& s : list) a.push_back({{"profile", s.profile}, {"id", s.who}, {"value", s.value}});
    return a;
  };
  Json causes = Json::array();
  for (const auto& c : r.causes) {
    Json sites = Json::array();
    for (const auto& s : c.sites)
      sites.push_back({{"context", s.context},
                       {"label", s.label},
                       {"path", s.path},
                       {"share", s.share},
                       {"correlation", s.correlation}});
    causes.push_back({{"context", c.context},
                      {"label", c.label},
                      {"path", c.path},
                      {"entry", c.entry},
                      {"entry_label", c.entryLabel},
                      {"focus", c.focus},
                      {"focus_label", c.focusLabel},
                      {"share", c.share},
                      {"correlation", c.correlation},
                      {"beta", c.beta},
                      {"p_value", c.pValue},
                      {"mean", c.mean},
                      {"max", c.max},
                      {"threads", threads(c.threads)},
                      {"sites", std::move(sites)}});
  }
  Json j{{"section", r.section},
         {"section_measure", r.sectionMeasure},
         {"notes", r.notes},
         {"metric", r.metric},
         {"unit", r.unit},
         {"threads", r.threadsLabel},
         {"samples", r.threads},
         {"sum", r.sum},
         {"mean", r.mean},
         {"max", r.max},
         {"stddev", r.stddev},
         {"imbalance", detail::jsonNumber(r.imbalance)},
         {"sampling_error", r.samplingError},
         {"slowest", threads(r.slowest)},
         {"contexts_in_section", r.contextsInSection},
         {"contexts_analysed", r.contextsAnalysed},
         {"scopes_tested", r.scopesTested},
         {"verdict", analysis::toString(r.verdict)},
         {"verdict_text", r.verdictText},
         {"model_p_value", r.modelPValue},
         {"r2", r.r2},
         {"causes", std::move(causes)}};
  out << detail::dumpJson(j, 1) << "\n";
}

}  // namespace csp::views
