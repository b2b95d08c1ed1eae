// Text and JSON of an imbalance report (csp-views --imbalance).
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <ostream>

#include "csp/analysis/imbalance.hpp"
#include "csp/metrics/accumulator.hpp"

namespace csp::analysis {

namespace {

std::string number(double v) { return metrics::compactNumber(v); }

}  // namespace

void renderImbalanceText(const ImbalanceReport& r, std::ostream& out) {
  if (r.sectionMeasure == "inclusive")
    out << fmt::format("load imbalance in {}: {} inclusive over {} threads ({})\n", r.section, r.metric, r.threads,
                       r.threadsLabel);
  else
    out << fmt::format("load imbalance in {}: {} over {} threads ({}); contexts by {}\n", r.section, r.sectionMeasure,
                       r.threads, r.threadsLabel, r.metric);
  for (const auto& note : r.notes) out << "  note: " << note << "\n";
  out << fmt::format("  per thread: mean {} {}, max {}, stddev {}; max/mean {:.2f}\n", number(r.mean), r.unit, number(r.max),
                     number(r.stddev), r.imbalance);
  if (!r.slowest.empty()) {
    out << "  slowest threads (above mean + stddev):";
    for (const auto& s : r.slowest) out << fmt::format(" {} ({})", s.who, number(s.value));
    out << "\n";
  }
  out << fmt::format("  contexts analysed: {} of {} in the section; {} cluster{}", r.contextsAnalysed, r.contextsInSection,
                     r.clusters.size(), r.clusters.size() == 1 ? "" : "s");
  if (r.regression) {
    std::size_t kept = 0;
    for (const auto& c : r.clusters) kept += c.kept;
    out << fmt::format("; the regression keeps {} (R² {:.2f})\n", kept, r.r2);
  } else {
    out << "; too few threads for a regression (fewer than 8): clusters ranked by correlation\n";
  }
  if (r.causes.empty()) {
    out << "no context explains a share of the imbalance above the threshold\n";
    return;
  }
  out << fmt::format("{:>4} {:>7} {:>7} {:>6} {:>6}  {}\n", "rank", "score", "share", "corr", "beta", "context");
  for (std::size_t i = 0; i < r.causes.size(); ++i) {
    const auto& c = r.causes[i];
    out << fmt::format("{:>4} {:>7.3f} {:>6.1f}% {:>6.2f} {:>6.2f}  {}  [{}]  #{}\n", i + 1, c.score, 100 * c.share,
                       c.correlation, c.beta, c.leaderLabel, c.path, c.leader);
    if (c.focus != c.leader) out << fmt::format("{:>36}  where: {}  #{}\n", "", c.focusLabel, c.focus);
    for (const auto& p : c.parts) out << fmt::format("{:>36}  part: {} ({:.1f}%)  #{}\n", "", p.label, 100 * p.share, p.node);
    out << fmt::format("{:>36}  per thread: mean {}, max {}; most in", "", number(c.mean), number(c.max));
    for (std::size_t k = 0; k < std::min<std::size_t>(c.threads.size(), 3); ++k)
      out << fmt::format("{} {} ({})", k ? "," : "", c.threads[k].who, number(c.threads[k].value));
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
  for (const auto& c : r.causes)
    causes.push_back({{"leader", c.leader},
                      {"leader_label", c.leaderLabel},
                      {"path", c.path},
                      {"focus", c.focus},
                      {"focus_label", c.focusLabel},
                      {"cluster", c.cluster},
                      {"score", c.score},
                      {"share", c.share},
                      {"correlation", c.correlation},
                      {"beta", c.beta},
                      {"mean", c.mean},
                      {"max", c.max},
                      {"threads", threads(c.threads)},
                      {"parts", [&] {
                         Json a = Json::array();
                         for (const auto& p : c.parts) a.push_back({{"node", p.node}, {"label", p.label}, {"share", p.share}});
                         return a;
                       }()}});
  Json clusters = Json::array();
  for (const auto& c : r.clusters) clusters.push_back({{"members", c.members}, {"kept", c.kept}, {"p_value", c.pValue}});
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
         {"imbalance", std::isnan(r.imbalance) ? Json(nullptr) : Json(r.imbalance)},
         {"slowest", threads(r.slowest)},
         {"contexts_in_section", r.contextsInSection},
         {"contexts_analysed", r.contextsAnalysed},
         {"regression", r.regression},
         {"r2", r.r2},
         {"clusters", std::move(clusters)},
         {"causes", std::move(causes)}};
  out << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace csp::analysis
