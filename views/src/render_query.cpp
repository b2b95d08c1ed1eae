// csp-query's answers in text, CSV and JSON: a table of results per process (with min, median
// and max over the processes), or the frames of a query without measure.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "csp/analysis/canned.hpp"
#include "csp/views/format.hpp"
#include "csp/views/render.hpp"
#include "json.hpp"

namespace csp::views {

namespace {

using analysis::Number;
using Json = nlohmann::json;

// Integers as JSON integers while they fit 64 bits (beyond, a real), reals with round-trip
// precision, none as null.
Json jsonNumber(const Number& n) {
  if (n.kind == Number::Kind::Integer) {
    if (n.integer >= INT64_MIN && n.integer <= INT64_MAX) return static_cast<std::int64_t>(n.integer);
    if (n.integer > 0 && n.integer <= UINT64_MAX) return static_cast<std::uint64_t>(n.integer);
  }
  const double v = n.toDouble();
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

struct Summary {
  Number min, median, max;
  bool any = false;
};
Summary summary(const std::vector<QueryCell>& cells) {
  std::vector<Number> v;
  for (const auto& c : cells)
    if (c.kind == QueryCell::Kind::Number && c.number.kind != Number::Kind::None) v.push_back(c.number);
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.any = true;
  s.min = v.front();
  s.max = v.back();
  s.median = analysis::median(v);
  return s;
}

// A set in text and CSV: its items separated by spaces, region names quoted where they would not
// be told apart (listItem).
std::string listText(const QueryCell& c) {
  std::string out;
  for (const auto& m : c.items)
    out += (out.empty() ? "" : " ") + (c.kind == QueryCell::Kind::Regions ? analysis::listItem(m) : m);
  return out;
}

std::string cellText(const QueryCell& c) {
  switch (c.kind) {
    case QueryCell::Kind::Absent:
      return "-";
    case QueryCell::Kind::Number:
      return toString(c.number);
    default:
      return listText(c);
  }
}

Json cellJson(const QueryCell& c) {
  switch (c.kind) {
    case QueryCell::Kind::Absent:
      return nullptr;
    case QueryCell::Kind::Number:
      return jsonNumber(c.number);
    case QueryCell::Kind::Regions:
      return c.items;
    case QueryCell::Kind::Threads:
      break;
  }
  Json threads = Json::array();
  for (const auto& t : c.items) threads.push_back(std::stoull(t));
  return threads;
}

Json rowJson(const QueryRow& r) {
  Json values = Json::array();
  for (const auto& c : r.cells) values.push_back(cellJson(c));
  Json row{{"name", r.name}, {"unit", r.unit}, {"values", std::move(values)}};
  if (const auto s = summary(r.cells); s.any)
    row["summary"] = {{"min", jsonNumber(s.min)}, {"median", jsonNumber(s.median)}, {"max", jsonNumber(s.max)}};
  return row;
}

void tableJson(const QueryAnswer& t, std::ostream& out) {
  Json rows = Json::array();
  for (const auto& r : t.rows) rows.push_back(rowJson(r));
  out << detail::dumpJson(Json{{"processes", t.processes}, {"rows", std::move(rows)}}, 2) << "\n";
}

// The table as rows of text: a header, then a row per result.
std::vector<std::vector<std::string>> tableGrid(const QueryAnswer& t) {
  const bool multi = t.processes.size() > 1;
  std::vector<std::vector<std::string>> grid;
  std::vector<std::string> header{"result", "unit"};
  for (const auto& p : t.processes) header.push_back(p);
  if (multi) header.insert(header.end(), {"min", "median", "max"});
  grid.push_back(header);
  for (const auto& r : t.rows) {
    std::vector<std::string> row{r.name, r.unit};
    for (const auto& c : r.cells) row.push_back(cellText(c));
    if (multi) {
      const auto s = summary(r.cells);
      for (const Number* n : {&s.min, &s.median, &s.max}) row.push_back(s.any ? toString(*n) : "-");
    }
    grid.push_back(row);
  }
  return grid;
}

void csvRows(const std::vector<std::vector<std::string>>& grid, std::ostream& out) {
  for (const auto& row : grid) {
    for (std::size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << csvField(row[i]);
    out << "\n";
  }
}

// Names and units left-aligned, values right-aligned, columns as wide as their widest cell.
void alignedRows(const std::vector<std::vector<std::string>>& grid, std::ostream& out) {
  std::vector<std::size_t> width(grid.front().size(), 0);
  for (const auto& row : grid)
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : grid) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i) line += "  ";
      line += i < 2 ? fmt::format("{:<{}}", row[i], width[i]) : fmt::format("{:>{}}", row[i], width[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

Json frameJson(const analysis::FrameRow& f) {
  Json members = Json::array();
  for (const auto& [t, r] : f.members) members.push_back({{"thread", t}, {"region", r}});
  return {{"begin_ns", f.beginNs}, {"end_ns", f.endNs}, {"members", std::move(members)}};
}

Json bindingJson(const analysis::BindingResult& b) {
  Json shown = Json::array();
  for (const auto& f : b.frames) shown.push_back(frameJson(f));
  return {{"binding", b.label}, {"frames", b.frameCount}, {"duration_ns", b.durationNs}, {"shown", std::move(shown)}};
}

void framesJson(const QueryAnswer& a, std::ostream& out) {
  Json j = Json::array();
  for (const auto& p : a.results) {
    Json bindings = Json::array();
    for (const auto& b : p.bindings) bindings.push_back(bindingJson(b));
    j.push_back({{"process", p.label}, {"bindings", std::move(bindings)}});
  }
  out << detail::dumpJson(j, 2) << "\n";
}

std::string membersText(const analysis::FrameRow& f) {
  std::string members;
  for (const auto& [t, r] : f.members)
    members += fmt::format("{}({}, {})", members.empty() ? "" : " ", t, analysis::listItem(r));
  return members;
}

void framesText(const QueryAnswer& a, bool csv, std::ostream& out) {
  if (csv) out << "process,binding,begin_ns,end_ns,members\n";
  for (const auto& p : a.results)
    for (const auto& b : p.bindings) {
      if (!csv)
        out << fmt::format("{}{}: {} frames, {} ns{}\n", p.label, b.label.empty() ? "" : " " + b.label, b.frameCount,
                           b.durationNs,
                           b.frameCount > b.frames.size() ? fmt::format(" (first {} shown)", a.limit) : "");
      for (const auto& f : b.frames) {
        if (csv)
          out << fmt::format("{},{},{},{},{}\n", csvField(p.label), csvField(b.label), f.beginNs, f.endNs,
                             csvField(membersText(f)));
        else
          out << fmt::format("  [{}, {}) ns  {}\n", f.beginNs, f.endNs, membersText(f));
      }
    }
}

}  // namespace

void renderQueryText(const QueryAnswer& a, std::ostream& out) {
  if (a.frames) return framesText(a, false, out);
  alignedRows(tableGrid(a), out);
}

void renderQueryCsv(const QueryAnswer& a, std::ostream& out) {
  if (a.frames) return framesText(a, true, out);
  csvRows(tableGrid(a), out);
}

void renderQueryJson(const QueryAnswer& a, std::ostream& out) {
  if (a.frames) return framesJson(a, out);
  tableJson(a, out);
}

void renderCannedList(std::ostream& out) {
  for (const auto& c : analysis::cannedAnalyses())
    out << fmt::format("{} {}\n    {}\n", c.name, c.arguments, c.description);
}

}  // namespace csp::views
