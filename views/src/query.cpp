// A csp-query request answered as a table (or frames) of the processes' results: the queries and
// frames are analysis/'s, the table is what every renderer prints (answers.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "csp/analysis/canned.hpp"
#include "csp/analysis/database_source.hpp"
#include "csp/views/request.hpp"
#include "csp/views/session.hpp"

namespace csp::views {

using namespace csp::analysis;

QueryRequest queryRequestFrom(const QueryOptions& options) {
  QueryRequest r;
  r.limit = options.limit;
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

QueryAnswer Session::query(const QueryRequest& request) const {
  const auto& db = database();
  const auto logs = loadLogs(db);
  if (logs.processes.empty()) throw ViewError(noLogsExplanation(db, logs));
  QueryAnswer answer;
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
