// csp-query: concurrency queries over the region event logs of a CSP database (docs/query.md).
// Argument parsing and rendering only; frames, the language and the analyses live in analysis/.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "csp/analysis/canned.hpp"
#include "csp/analysis/database_source.hpp"
#include "csp/analysis/evaluate.hpp"
#include "csp/analysis/query.hpp"
#include "csp/storage/database.hpp"
#include "csp/views/format.hpp"

namespace {

using namespace csp::analysis;

// A value to print: a number (measures, arithmetic, canned figures) or a set.
struct Cell {
  enum class Kind : std::uint8_t { Absent, Number, Threads, Regions } kind = Kind::Absent;
  Number number;
  std::vector<std::string> items;  // Threads (decimal numbers), Regions (names)
};

struct Table {
  std::vector<std::string> processes;
  std::vector<std::string> rowNames;  // in first-seen order
  std::vector<std::string> units;
  std::map<std::string, std::vector<Cell>> cells;  // row -> per process
  void put(const std::string& row, const std::string& unit, std::size_t process, Cell c) {
    auto it = cells.find(row);
    if (it == cells.end()) {
      rowNames.push_back(row);
      units.push_back(unit);
      it = cells.emplace(row, std::vector<Cell>(processes.size())).first;
    }
    it->second[process] = std::move(c);
  }
};

// Region names come from programs and need not be UTF-8: in JSON, invalid bytes become U+FFFD
// instead of failing the output (text and CSV keep the bytes), as csp-views does.
std::string dumpJson(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Integers as JSON integers while they fit 64 bits (beyond, a real), reals with round-trip
// precision, none as null.
nlohmann::json jsonNumber(const Number& n) {
  if (n.kind == Number::Kind::Integer) {
    if (n.integer >= INT64_MIN && n.integer <= INT64_MAX) return static_cast<std::int64_t>(n.integer);
    if (n.integer > 0 && n.integer <= UINT64_MAX) return static_cast<std::uint64_t>(n.integer);
  }
  const double v = n.toDouble();
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

struct Stats {
  Number min, median, max;
  bool any = false;
};
Stats stats(const std::vector<Cell>& cells) {
  std::vector<Number> v;
  for (const auto& c : cells)
    if (c.kind == Cell::Kind::Number && c.number.kind != Number::Kind::None) v.push_back(c.number);
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.any = true;
  s.min = v.front();
  s.max = v.back();
  s.median = median(v);
  return s;
}

// A set in text and CSV: its items separated by spaces, region names quoted where they would not
// be told apart (listItem).
std::string listText(const Cell& c) {
  std::string out;
  for (const auto& m : c.items) out += (out.empty() ? "" : " ") + (c.kind == Cell::Kind::Regions ? listItem(m) : m);
  return out;
}

std::string cellText(const Cell& c) {
  switch (c.kind) {
    case Cell::Kind::Absent: return "-";
    case Cell::Kind::Number: return toString(c.number);
    default: return listText(c);
  }
}

nlohmann::json cellJson(const Cell& c) {
  switch (c.kind) {
    case Cell::Kind::Absent: return nullptr;
    case Cell::Kind::Number: return jsonNumber(c.number);
    case Cell::Kind::Regions: return c.items;
    case Cell::Kind::Threads: break;
  }
  nlohmann::json threads = nlohmann::json::array();
  for (const auto& t : c.items) threads.push_back(std::stoull(t));
  return threads;
}

void renderJson(const Table& t, std::ostream& out) {
  nlohmann::json j;
  j["processes"] = t.processes;
  j["rows"] = nlohmann::json::array();
  for (std::size_t r = 0; r < t.rowNames.size(); ++r) {
    const auto& cells = t.cells.at(t.rowNames[r]);
    nlohmann::json row;
    row["name"] = t.rowNames[r];
    row["unit"] = t.units[r];
    nlohmann::json values = nlohmann::json::array();
    for (const auto& c : cells) values.push_back(cellJson(c));
    row["values"] = values;
    const auto s = stats(cells);
    if (s.any) row["summary"] = {{"min", jsonNumber(s.min)}, {"median", jsonNumber(s.median)}, {"max", jsonNumber(s.max)}};
    j["rows"].push_back(row);
  }
  out << dumpJson(j) << "\n";
}

void renderTable(const Table& t, const std::string& format, std::ostream& out) {
  if (format == "json") return renderJson(t, out);
  const bool multi = t.processes.size() > 1;
  std::vector<std::vector<std::string>> grid;
  std::vector<std::string> header{"result", "unit"};
  for (const auto& p : t.processes) header.push_back(p);
  if (multi) {
    header.push_back("min");
    header.push_back("median");
    header.push_back("max");
  }
  grid.push_back(header);
  for (std::size_t r = 0; r < t.rowNames.size(); ++r) {
    const auto& cells = t.cells.at(t.rowNames[r]);
    std::vector<std::string> row{t.rowNames[r], t.units[r]};
    for (const auto& c : cells) row.push_back(cellText(c));
    if (multi) {
      const auto s = stats(cells);
      for (const Number* n : {&s.min, &s.median, &s.max}) row.push_back(s.any ? toString(*n) : "-");
    }
    grid.push_back(row);
  }
  if (format == "csv") {
    for (const auto& row : grid) {
      for (std::size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << csp::views::csvField(row[i]);
      out << "\n";
    }
    return;
  }
  std::vector<std::size_t> width(header.size(), 0);
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

void renderFrames(const std::vector<ProcessResult>& results, const std::string& format, std::size_t limit,
                  std::ostream& out) {
  if (format == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& p : results) {
      nlohmann::json pj;
      pj["process"] = p.label;
      pj["bindings"] = nlohmann::json::array();
      for (const auto& b : p.bindings) {
        nlohmann::json bj;
        bj["binding"] = b.label;
        bj["frames"] = b.frameCount;
        bj["duration_ns"] = b.durationNs;
        bj["shown"] = nlohmann::json::array();
        for (const auto& f : b.frames) {
          nlohmann::json fj;
          fj["begin_ns"] = f.beginNs;
          fj["end_ns"] = f.endNs;
          fj["members"] = nlohmann::json::array();
          for (const auto& [t, r] : f.members) fj["members"].push_back({{"thread", t}, {"region", r}});
          bj["shown"].push_back(fj);
        }
        pj["bindings"].push_back(bj);
      }
      j.push_back(pj);
    }
    out << dumpJson(j) << "\n";
    return;
  }
  if (format == "csv") out << "process,binding,begin_ns,end_ns,members\n";
  for (const auto& p : results)
    for (const auto& b : p.bindings) {
      if (format == "text")
        out << fmt::format("{}{}: {} frames, {} ns{}\n", p.label, b.label.empty() ? "" : " " + b.label, b.frameCount,
                           b.durationNs, b.frameCount > b.frames.size() ? fmt::format(" (first {} shown)", limit) : "");
      for (const auto& f : b.frames) {
        std::string members;
        for (const auto& [t, r] : f.members) members += fmt::format("{}({}, {})", members.empty() ? "" : " ", t, listItem(r));
        if (format == "csv")
          out << fmt::format("{},{},{},{},{}\n", csp::views::csvField(p.label), csp::views::csvField(b.label), f.beginNs,
                             f.endNs, csp::views::csvField(members));
        else
          out << fmt::format("  [{}, {}) ns  {}\n", f.beginNs, f.endNs, members);
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "csp-query: concurrency queries over the region event logs of a CSP database.\n"
      "  csp-query DB 'Duration(exists t: (t, solve))'\n"
      "  csp-query DB 'Duration(∃1 t : (t, L) ∧ ∀u ≠ t : (u, B)) / Duration(∃t : (t, L))'\n"
      "  csp-query DB 'Duration((t, main))'           one value per thread t\n"
      "  csp-query DB --canned straggler compute barrier\n"
      "Reference: docs/query.md",
      "csp-query"};
  std::string dbPath, query, format = "text", canned;
  std::vector<std::string> cannedArgs;
  bool listCanned = false;
  std::size_t limit = 50;
  app.add_option("database", dbPath, "the database (csp-prof-mpi's output)");
  app.add_option("query", query, "the query (docs/query.md); with --canned, the analysis's arguments");
  app.add_option("args", cannedArgs, "--canned: further arguments of the analysis");
  app.add_option("--canned", canned, "run a canned analysis (see --list-canned)");
  app.add_flag("--list-canned", listCanned, "list the canned analyses and exit");
  app.add_option("--format", format, "text, csv or json")->check(CLI::IsMember({"text", "csv", "json"}))->capture_default_str();
  app.add_option("--limit", limit, "pruned frames shown per process for a query without measure")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "csp-query: " << e.what() << " (csp-query --help shows the options)\n";
    return 2;
  }
  if (listCanned) {
    for (const auto& c : cannedAnalyses()) std::cout << fmt::format("{} {}\n    {}\n", c.name, c.arguments, c.description);
    return 0;
  }
  if (dbPath.empty()) {
    std::cerr << "csp-query: no database given (csp-query --help shows the options)\n";
    return 2;
  }
  if (canned.empty() && query.empty()) {
    std::cerr << "csp-query: no query given: csp-query DB 'QUERY' or csp-query DB --canned NAME ARGS... (docs/query.md)\n";
    return 2;
  }
  if (canned.empty() && !cannedArgs.empty()) {
    std::cerr << "csp-query: one query only; quote it as one argument: csp-query DB 'QUERY'\n";
    return 2;
  }
  if (!canned.empty() && !query.empty()) cannedArgs.insert(cannedArgs.begin(), query);

  try {
    std::optional<Query> parsed;
    if (canned.empty()) {
      try {
        parsed = parseQuery(query);
      } catch (const QueryError& e) {
        std::cerr << fmt::format("csp-query: error: query: column {}: {}\n  {}\n  {}^\n", e.column(), e.message(), query,
                                 std::string(e.column() > 0 ? e.column() - 1 : 0, ' '));
        return 1;
      }
    }
    const auto db = csp::storage::Database::open(dbPath);
    const auto logs = loadLogs(*db);
    if (logs.processes.empty()) {
      std::cerr << "csp-query: error: " << noLogsExplanation(*db, logs) << "\n";
      return 1;
    }
    std::vector<ProcessResult> results;
    Table table;
    for (const auto& p : logs.processes) table.processes.push_back(p.label);
    std::vector<std::string> warnings;
    auto warn = [&](const std::string& w) {
      const std::string text = "warning: " + w;
      if (std::find(warnings.begin(), warnings.end(), text) == warnings.end()) warnings.push_back(text);
    };
    for (std::size_t i = 0; i < logs.processes.size(); ++i) {
      const auto& p = logs.processes[i];
      if (!canned.empty()) {
        std::vector<std::string> cannedWarnings;
        for (const auto& row : runCanned(canned, cannedArgs, logs.tree, p, &cannedWarnings))
          table.put(row.key.empty() ? row.name : row.name + " " + row.key, row.unit, i, Cell{Cell::Kind::Number, row.value, {}});
        for (const auto& w : cannedWarnings) warn(w);
        continue;
      }
      EvalOptions options;
      options.maxFrames = limit;
      auto r = evaluate(*parsed, logs.tree, p, options);
      for (const auto& w : r.warnings) warn(w);
      if (parsed->kind == Query::Kind::Value) {
        const bool durationLike = parsed->expr->kind == Expr::Kind::Measure;
        const std::string unit = !durationLike ? ""
                                 : parsed->expr->measure == Measure::Duration ? "ns"
                                 : parsed->expr->measure == Measure::Area     ? "thread-ns"
                                                                              : "threads";
        for (const auto& b : r.bindings)
          table.put(b.label.empty() ? "value" : b.label, unit, i, Cell{Cell::Kind::Number, b.number, {}});
      } else if (parsed->kind == Query::Kind::Attribute) {
        const bool threads = parsed->attribute == Attribute::WhichThreads;
        for (const auto& b : r.bindings)
          table.put(b.label.empty() ? toString(parsed->attribute) : b.label, threads ? "threads" : "regions", i,
                    Cell{threads ? Cell::Kind::Threads : Cell::Kind::Regions, {}, b.members});
      }
      results.push_back(std::move(r));
    }
    if (logs.eventsLost > 0)
      warnings.push_back(fmt::format("warning: {} region events were not logged (full buffers; csp-run --region-log-events); "
                                     "frames after a thread's last logged event miss its later regions",
                                     logs.eventsLost));
    for (const auto& w : warnings) std::cerr << "csp-query: " << w << "\n";
    if (!canned.empty() || parsed->kind != Query::Kind::Frames)
      renderTable(table, format, std::cout);
    else
      renderFrames(results, format, limit, std::cout);
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "csp-query: error: writing the output failed\n";
      return 1;
    }
  } catch (const QueryError& e) {
    std::cerr << "csp-query: error: " << (e.column() ? std::string(e.what()) : e.message()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "csp-query: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
