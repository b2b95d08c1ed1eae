// A csp-query request answered as a table (or frames) of the processes' results: the queries and
// frames are analysis/'s, the table is what every renderer prints (answers.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "csp/analysis/canned.hpp"
#include "csp/analysis/database_source.hpp"
#include "csp/analysis/distributed.hpp"
#include "csp/views/request.hpp"
#include "csp/views/session.hpp"

namespace csp::views {

using namespace csp::analysis;

namespace {

// "-20%", "20%" or "20": the fraction of time removed, in (0, 1].
double parseReduction(const std::string& text, const std::string& option) {
  std::string t = text;
  while (!t.empty() && t.front() == ' ') t.erase(t.begin());
  if (!t.empty() && t.front() == '-') t.erase(t.begin());
  if (!t.empty() && t.back() == '%') t.pop_back();
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !(v > 0 && v <= 100))
    throw ViewError(fmt::format("{} '{}': the reduction must be a percentage in (0, 100], e.g. -20%", option, text));
  return v / 100;
}

void parseWhatIf(const QueryOptions& o, QueryRequest& r) {
  if (!o.query.empty() || !o.canned.empty())
    throw ViewError("--what-if and --what-if-rank replace the query: give no query and no --canned with them");
  if (!o.whatIfRank.empty()) {
    r.whatIfAll = true;
    r.whatIfReduction = parseReduction(o.whatIfRank, "--what-if-rank");
    return;
  }
  const auto at = o.whatIf.find_last_of("= ");
  if (at == std::string::npos || at == 0)
    throw ViewError(fmt::format("--what-if '{}': expected REGION=-PERCENT%, e.g. solve=-20%", o.whatIf));
  r.whatIfRegion = o.whatIf.substr(0, at);
  while (!r.whatIfRegion.empty() && r.whatIfRegion.back() == ' ') r.whatIfRegion.pop_back();
  r.whatIfReduction = parseReduction(o.whatIf.substr(at + 1), "--what-if");
}

}  // namespace

QueryRequest queryRequestFrom(const QueryOptions& options) {
  QueryRequest r;
  r.limit = options.limit;
  r.global = options.global;
  r.mpiWaits = options.mpiWaits;
  if (r.mpiWaits) {
    if (!options.query.empty() || !options.canned.empty() || !options.whatIf.empty() || !options.whatIfRank.empty())
      throw ViewError("--mpi-waits replaces the query: give no query, --canned or --what-if with it");
    return r;
  }
  if (!options.whatIf.empty() || !options.whatIfRank.empty()) {
    parseWhatIf(options, r);
    return r;
  }
  if (options.canned.empty()) {
    r.query = std::make_shared<const Query>(parseQuery(options.query));
    return r;
  }
  r.canned = options.canned;
  r.cannedArgs = options.cannedArgs;
  // The query's place on the command line holds the analysis's first argument.
  if (!options.query.empty()) r.cannedArgs.insert(r.cannedArgs.begin(), options.query);
  return r;
}

namespace {

// Rows in the order they are first met, each with a cell per process.
class TableBuilder {
 public:
  explicit TableBuilder(QueryAnswer& answer) : answer_(answer) {}
  void put(const std::string& row, const std::string& unit, std::size_t process, QueryCell cell) {
    auto [it, fresh] = index_.try_emplace(row, answer_.rows.size());
    if (fresh) answer_.rows.push_back({row, unit, std::vector<QueryCell>(answer_.processes.size())});
    answer_.rows[it->second].cells[process] = std::move(cell);
  }

 private:
  QueryAnswer& answer_;
  std::map<std::string, std::size_t> index_;
};

std::string unitOf(const Query& q) {
  if (q.expr->kind != Expr::Kind::Measure) return "";
  return q.expr->measure == Measure::Duration ? "ns" : q.expr->measure == Measure::Area ? "thread-ns" : "threads";
}

void putResult(const Query& q, const ProcessResult& r, std::size_t process, TableBuilder& table) {
  if (q.kind == Query::Kind::Value) {
    for (const auto& b : r.bindings)
      table.put(b.label.empty() ? "value" : b.label, unitOf(q), process,
                QueryCell{QueryCell::Kind::Number, b.number, {}});
  } else if (q.kind == Query::Kind::Attribute) {
    const bool threads = q.attribute == Attribute::WhichThreads;
    for (const auto& b : r.bindings)
      table.put(b.label.empty() ? toString(q.attribute) : b.label, threads ? "threads" : "regions", process,
                QueryCell{threads ? QueryCell::Kind::Threads : QueryCell::Kind::Regions, {}, b.members});
  }
}

}  // namespace

namespace {

Number percent(double fraction) { return Number::ofReal(100 * fraction); }
Number ns(std::uint64_t v) { return Number::ofInteger(static_cast<Number::Int>(v)); }

// dCOZ (docs/query.md "What if a region were faster"): one column, the whole run.
QueryAnswer whatIfAnswer(const storage::Database& db, const DatabaseLogs& logs, const QueryRequest& request) {
  QueryAnswer answer;
  answer.processes.push_back(fmt::format("all {} processes", logs.processes.size()));
  TableBuilder table(answer);
  auto put = [&](const std::string& row, const std::string& unit, Number n) {
    table.put(row, unit, 0, QueryCell{QueryCell::Kind::Number, n, {}});
  };
  std::vector<std::string> regions;
  if (request.whatIfAll) {
    for (std::size_t r = 1; r < logs.tree.size(); ++r)
      if (std::find(regions.begin(), regions.end(), logs.tree.name[r]) == regions.end())
        regions.push_back(logs.tree.name[r]);
  } else {
    if (std::find(logs.tree.name.begin(), logs.tree.name.end(), request.whatIfRegion) == logs.tree.name.end())
      throw ViewError(fmt::format("--what-if: no region named '{}' in the database", request.whatIfRegion));
    regions.push_back(request.whatIfRegion);
  }
  std::vector<std::pair<WhatIfRange, std::string>> results;
  results.reserve(regions.size());
  for (const auto& name : regions) results.emplace_back(predictWhatIf(db, logs, name, request.whatIfReduction), name);
  std::stable_sort(results.begin(), results.end(),
                   [](const auto& a, const auto& b) { return a.first.middle.speedup() > b.first.middle.speedup(); });
  if (!request.whatIfAll) {
    const WhatIfRange& w = results.front().first;
    put("run time", "ns", ns(w.middle.originalNs));
    put("predicted run time", "ns", ns(w.middle.predictedNs));
    put("predicted speed-up", "%", percent(w.middle.speedup()));
    put("speed-up lower bound", "%", percent(w.speedupLo));
    put("speed-up upper bound", "%", percent(w.speedupHi));
    put("region compute time", "ns", ns(w.middle.regionNs));
    return answer;
  }
  for (const auto& [w, name] : results) put(name, "%", percent(w.middle.speedup()));
  return answer;
}

// One column per process, each figure with its lower and upper bound.
QueryAnswer mpiWaitsAnswer(const storage::Database& db, const DatabaseLogs& logs) {
  QueryAnswer answer;
  const auto waits = mpiWaits(db, logs);
  for (const auto& w : waits) answer.processes.push_back(w.label);
  TableBuilder table(answer);
  auto put = [&](const std::string& row, const std::string& unit, std::size_t column, std::uint64_t v) {
    table.put(row, unit, column, QueryCell{QueryCell::Kind::Number, ns(v), {}});
  };
  for (std::size_t c = 0; c < waits.size(); ++c) {
    const RankWaits& w = waits[c];
    put("late-sender lower", "ns", c, w.lateSender.lo);
    put("late-sender upper", "ns", c, w.lateSender.hi);
    put("late-receiver lower", "ns", c, w.lateReceiver.lo);
    put("late-receiver upper", "ns", c, w.lateReceiver.hi);
    put("collective-wait lower", "ns", c, w.collectiveWait.lo);
    put("collective-wait upper", "ns", c, w.collectiveWait.hi);
    put("collectives", "", c, w.collectives);
    put("straggler certain", "", c, w.stragglerCertain);
    put("straggler possible", "", c, w.stragglerPossible);
  }
  // Per kind of collective, for the kinds of the run (rows in CollectiveOp order).
  std::map<CollectiveOp, bool> kinds;
  for (const auto& w : waits)
    for (const auto& [op, k] : w.byKind) kinds[op] = true;
  for (const auto& [op, unused] : kinds) {
    const std::string name = collectiveOpName(op);
    for (std::size_t c = 0; c < waits.size(); ++c) {
      auto it = waits[c].byKind.find(op);
      const KindWaits k = it == waits[c].byKind.end() ? KindWaits{} : it->second;
      put(name + " wait lower", "ns", c, k.wait.lo);
      put(name + " wait upper", "ns", c, k.wait.hi);
      put(name + " count", "", c, k.count);
    }
  }
  return answer;
}

}  // namespace

QueryAnswer Session::query(const QueryRequest& request) const {
  const auto& db = database();
  const auto logs0 = loadLogs(db);
  if (logs0.processes.empty()) throw ViewError(noLogsExplanation(db, logs0));
  if (!request.whatIfRegion.empty() || request.whatIfAll) return whatIfAnswer(db, logs0, request);
  if (request.mpiWaits) return mpiWaitsAnswer(db, logs0);
  // --global: one input whose threads are those of every process, on rank 0's clock.
  std::optional<GlobalLogs> global;
  if (request.global) global = loadGlobalLogs(db, logs0);
  DatabaseLogs globalLogs;
  if (global) {
    globalLogs.tree = logs0.tree;
    globalLogs.eventsLost = logs0.eventsLost;
    globalLogs.processes.push_back(global->input);
  }
  const DatabaseLogs& logs = global ? globalLogs : logs0;
  QueryAnswer answer;
  if (global)
    for (const auto& n : global->notes) answer.warnings.push_back(fmt::format("note: {}", n));
  answer.limit = request.limit;
  answer.frames = request.query && request.query->kind == Query::Kind::Frames;
  for (const auto& p : logs.processes) answer.processes.push_back(p.label);
  TableBuilder table(answer);
  auto warn = [&](const std::string& w) {
    const std::string text = "warning: " + w;
    if (std::find(answer.warnings.begin(), answer.warnings.end(), text) == answer.warnings.end())
      answer.warnings.push_back(text);
  };
  for (std::size_t i = 0; i < logs.processes.size(); ++i) {
    const auto& p = logs.processes[i];
    if (!request.query) {
      std::vector<std::string> cannedWarnings;
      for (const auto& row : runCanned(request.canned, request.cannedArgs, logs.tree, p, &cannedWarnings))
        table.put(row.key.empty() ? row.name : row.name + " " + row.key, row.unit, i,
                  QueryCell{QueryCell::Kind::Number, row.value, {}});
      for (const auto& w : cannedWarnings) warn(w);
      continue;
    }
    EvalOptions options;
    options.maxFrames = request.limit;
    auto r = evaluate(*request.query, logs.tree, p, options);
    for (const auto& w : r.warnings) warn(w);
    putResult(*request.query, r, i, table);
    if (answer.frames) answer.results.push_back(std::move(r));
  }
  if (logs.eventsLost > 0)
    answer.warnings.push_back(
        fmt::format("warning: {} region events were not logged (full buffers; csp-run "
                    "--region-log-events); frames after a thread's last logged event miss its later "
                    "regions",
                    logs.eventsLost));
  return answer;
}

}  // namespace csp::views
