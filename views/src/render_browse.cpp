// JSON of what a browser asks beside the views (answers.hpp: a thread's top contexts, a source
// file with its line costs, the region timeline of a window). Only the web viewer reads them.
#include <ostream>

#include "csp/views/render.hpp"
#include "json.hpp"

namespace csp::views {

namespace {

using Json = nlohmann::json;
using detail::jsonNumber;

const char* scopeWord(storage::MetricScope s) {
  return s == storage::MetricScope::Inclusive ? "inclusive" : "exclusive";
}

Json columnsJson(const std::vector<Column>& columns, const std::vector<std::string>& units,
                 const std::vector<double>& rootSum) {
  Json cols = Json::array();
  for (std::size_t c = 0; c < columns.size(); ++c)
    cols.push_back({{"title", columns[c].title()},
                    {"metric", columns[c].metric},
                    {"statistic", toString(columns[c].statistic)},
                    {"scope", scopeWord(columns[c].scope)},
                    {"unit", c < units.size() ? units[c] : ""},
                    {"root_sum", jsonNumber(c < rootSum.size() ? rootSum[c] : NAN)}});
  return cols;
}

}  // namespace

void renderThreadContextsJson(const ThreadContexts& t, std::ostream& out) {
  Json contexts = Json::array();
  for (const auto& c : t.contexts)
    contexts.push_back({{"node", c.node}, {"label", c.label}, {"kind", c.kind}, {"value", jsonNumber(c.value)}});
  Json j{{"profile", t.profile},
         {"id", t.who},
         {"class", t.threadClass},
         {"metric", t.metric},
         {"unit", t.unit},
         {"scope", scopeWord(t.scope)},
         {"total", jsonNumber(t.total)},
         {"contexts_with_values", t.contextsWithValues},
         {"contexts", std::move(contexts)}};
  out << detail::dumpJson(j, -1) << "\n";
}

void renderSourceJson(const SourceFile& s, std::ostream& out) {
  Json lines = Json::array();
  for (const auto& l : s.lines) {
    Json values = Json::array();
    for (double v : l.values) values.push_back(jsonNumber(v));
    lines.push_back({{"line", l.line}, {"kind", l.kind}, {"name", l.name}, {"values", std::move(values)}});
  }
  Json j{{"file", s.file},
         {"readable", s.readable},
         {"reason", s.reason},
         {"text", s.text},
         {"columns", columnsJson(s.columns, s.units, s.rootSum)},
         {"lines", std::move(lines)}};
  out << detail::dumpJson(j, -1) << "\n";
}

void renderTimelineJson(const Timeline& t, std::ostream& out) {
  Json processes = Json::array();
  for (const auto& p : t.processes) {
    Json lanes = Json::array();
    for (const auto& lane : p.lanes) {
      // Intervals as arrays [begin, end, region, depth, visits, flags] (flags: 1 open before the
      // window, 2 open after it): a zoomed-out lane has thousands.
      Json intervals = Json::array();
      for (const auto& iv : lane.intervals)
        intervals.push_back(Json::array(
            {iv.beginNs, iv.endNs, iv.region, iv.depth, iv.visits, (iv.openBefore ? 1 : 0) | (iv.openAfter ? 2 : 0)}));
      lanes.push_back({{"thread", lane.thread},
                       {"id", lane.who},
                       {"class", lane.threadClass},
                       {"events_read", lane.eventsRead},
                       {"intervals", std::move(intervals)}});
    }
    Json frames = Json::array();
    for (const auto& f : p.frames) frames.push_back({{"begin", f.beginNs}, {"end", f.endNs}, {"binding", f.binding}});
    processes.push_back({{"process", p.process},
                         {"label", p.label},
                         {"duration", p.durationNs},
                         {"lanes", std::move(lanes)},
                         {"frames", std::move(frames)},
                         {"frames_in_all", p.framesInAll}});
  }
  Json j{{"from", t.fromNs},
         {"to", t.toNs},
         {"resolution", t.resolutionNs},
         {"regions", t.regions},
         {"processes", std::move(processes)},
         {"query", t.query}};
  out << detail::dumpJson(j, -1) << "\n";
}

}  // namespace csp::views
