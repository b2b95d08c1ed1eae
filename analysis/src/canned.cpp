#include "csp/analysis/canned.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace csp::analysis {

const std::vector<CannedInfo>& cannedAnalyses() {
  static const std::vector<CannedInfo> list = {
      {"imbalance", "[REGION...]",
       "load imbalance per region: each thread's time in the region and its deviation from the mean over the "
       "threads that run it, (Duration((t,R)) - Area(∃u:(u,R))/n) / (Area(∃u:(u,R))/n); all regions without arguments"},
      {"contention", "LOCK",
       "lock contention: Area(∃t:(t,LOCK)) (thread-time spent waiting; W·T(T-1)/2 for T threads serialised on "
       "critical sections of W), the most threads waiting at once, and each thread's waiting time"},
      {"pipeline", "WAIT STAGE...",
       "pipeline stage waits: w[i][j] = Duration((∀t ∈ threads(i) : (t,WAIT)) ∧ (∃t ∈ threads(j) : (t,STAGE_j))), "
       "the time all threads of stage i wait while stage j still works, raw and as a fraction of the pipeline's time; "
       "threads(i) are the threads that ever run STAGE_i"},
      {"straggler", "LOOP BARRIER",
       "straggler degree Duration(∃1 t:(t,LOOP) ∧ ∀u≠t:(u,BARRIER)) / Duration(∃t:(t,LOOP)), each thread's "
       "degree, and the straggler thread (the largest)"},
      {"barrier", "BARRIER",
       "barrier wait per thread, Duration((t,BARRIER)), the time any thread waits, and each thread's wait as a "
       "fraction of the time any thread is in a region"},
  };
  return list;
}

namespace {

// A region name as a quoted name of the query language (docs/query.md, "Grammar").
std::string quote(const std::string& region) {
  std::string q = "\"";
  for (char c : region) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

struct Runner {
  const RegionTree& tree;
  const ProcessInput& process;
  std::vector<std::string>* warnings;
  std::vector<CannedRow> rows;

  ProcessResult run(const std::string& q) {
    auto r = evaluate(parseQuery(q), tree, process);
    if (warnings)
      for (const auto& w : r.warnings)
        if (std::find(warnings->begin(), warnings->end(), w) == warnings->end()) warnings->push_back(w);
    return r;
  }

  // A value query; with a free thread variable, one row per thread.
  void value(const std::string& name, const std::string& q, const std::string& unit) {
    const auto r = run(q);
    for (const auto& b : r.bindings) rows.push_back({name, b.label, b.number, unit, q});
  }
  std::vector<std::string> threadsOf(const std::string& region) {
    const auto r = run("WhichThreads(exists t: (t, " + quote(region) + "))");
    return r.bindings.at(0).members;
  }
};

void requireArgs(const std::string& name, const std::vector<std::string>& args, std::size_t min, std::size_t max) {
  if (args.size() < min || args.size() > max) {
    for (const auto& c : cannedAnalyses())
      if (c.name == name) throw QueryError(0, fmt::format("canned analysis {} takes {}", name, c.arguments));
  }
}

}  // namespace

std::vector<CannedRow> runCanned(const std::string& name, const std::vector<std::string>& args, const RegionTree& tree,
                                 const ProcessInput& process, std::vector<std::string>* warnings) {
  Runner r{tree, process, warnings, {}};
  if (name == "imbalance") {
    std::vector<std::string> regions = args;
    if (regions.empty()) {
      std::set<std::string> names(tree.name.begin() + 1, tree.name.end());
      regions.assign(names.begin(), names.end());
    }
    for (const auto& region : regions) {
      const std::string R = quote(region);
      const std::string mean = fmt::format("(Area(exists u: (u, {0})) / Count(WhichThreads(exists u: (u, {0}))))", R);
      const auto users = r.threadsOf(region);
      if (users.empty()) continue;
      r.value(region + ":mean", mean, "ns");
      // Per thread (one pass for all threads), only the threads that run the region.
      const std::size_t from = r.rows.size();
      r.value(region + ":time", fmt::format("Duration((t, {}))", R), "ns");
      r.value(region + ":deviation", fmt::format("(Duration((t, {0})) - {1}) / {1}", R, mean), "ratio");
      r.rows.erase(std::remove_if(r.rows.begin() + static_cast<std::ptrdiff_t>(from), r.rows.end(),
                                  [&](const CannedRow& row) {
                                    const std::string t = row.key.substr(row.key.find('=') + 1);
                                    return std::find(users.begin(), users.end(), t) == users.end();
                                  }),
                   r.rows.end());
    }
  } else if (name == "contention") {
    requireArgs(name, args, 1, 1);
    const std::string L = quote(args[0]);
    r.value("contention-area", fmt::format("Area(exists t: (t, {}))", L), "thread-ns");
    r.value("max-waiting", fmt::format("MaxPar(exists t: (t, {}))", L), "threads");
    r.value("wait", fmt::format("Duration((t, {}))", L), "ns");
  } else if (name == "pipeline") {
    requireArgs(name, args, 2, 64);
    const std::string W = quote(args[0]);
    std::vector<std::string> stages(args.begin() + 1, args.end());
    std::vector<std::vector<std::string>> members;
    members.reserve(stages.size());
    for (const auto& s : stages) members.push_back(r.threadsOf(s));
    std::string any;
    for (const auto& s : stages) any += fmt::format("(t, {}) or ", quote(s));
    any += fmt::format("(t, {})", W);
    const std::string total = fmt::format("Duration(exists t: {})", any);
    r.value("pipeline-time", total, "ns");
    for (std::size_t i = 0; i < stages.size(); ++i)
      for (std::size_t j = 0; j < stages.size(); ++j) {
        if (members[i].empty() || members[j].empty()) continue;
        const std::string q =
            fmt::format("Duration((forall t in {{{}}} : (t, {})) and (exists u in {{{}}} : (u, {})))",
                        fmt::join(members[i], ", "), W, fmt::join(members[j], ", "), quote(stages[j]));
        const std::string key = stages[i] + "->" + stages[j];
        r.value("wait", q, "ns");
        r.rows.back().key = key;
        std::string fraction = "(";
        fraction += q;
        fraction += ") / ";
        fraction += total;
        r.value("wait-fraction", fraction, "ratio");
        r.rows.back().key = key;
      }
  } else if (name == "straggler") {
    requireArgs(name, args, 2, 2);
    const std::string L = quote(args[0]), B = quote(args[1]);
    const std::string loop = fmt::format("Duration(exists t: (t, {}))", L);
    r.value("loop-time", loop, "ns");
    r.value("straggler-time", fmt::format("Duration(exists1 t: (t, {0}) and forall u != t: (u, {1}))", L, B), "ns");
    r.value("straggler-degree",
            fmt::format("Duration(exists1 t: (t, {0}) and forall u != t: (u, {1})) / {2}", L, B,
                        fmt::format("Duration(exists v: (v, {}))", L)),
            "ratio");
    const std::size_t first = r.rows.size();
    r.value("thread-degree",
            fmt::format("Duration((t, {0}) and forall u != t: (u, {1})) / Duration(exists v: (v, {0}))", L, B),
            "ratio");
    // The straggler: the thread with the largest degree (none when all are 0 or undefined).
    double best = 0;
    std::string who;
    for (std::size_t i = first; i < r.rows.size(); ++i) {
      const double degree = r.rows[i].value.toDouble();
      if (std::isfinite(degree) && degree > best) {
        best = degree;
        who = r.rows[i].key.substr(r.rows[i].key.find('=') + 1);
      }
    }
    r.rows.push_back(
        {"straggler-thread", "", who.empty() ? Number{} : Number::ofInteger(std::stoull(who)), "thread", ""});
  } else if (name == "barrier") {
    requireArgs(name, args, 1, 1);
    const std::string B = quote(args[0]);
    r.value("any-waiting", fmt::format("Duration(exists t: (t, {}))", B), "ns");
    r.value("wait", fmt::format("Duration((t, {}))", B), "ns");
    r.value("wait-fraction", fmt::format("Duration((t, {})) / Duration(exists u: exists r: (u, r))", B), "ratio");
  } else {
    std::string names;
    for (const auto& c : cannedAnalyses()) names += (names.empty() ? "" : ", ") + c.name;
    throw QueryError(0, fmt::format("no canned analysis '{}' (there are: {})", name, names));
  }
  return r.rows;
}

}  // namespace csp::analysis
