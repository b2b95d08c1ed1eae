// csp-diff: matching two runs' canonical CCTs by symbolic path and computing the scaling loss of
// every context (docs/diff.md).
#include "csp/analysis/diff.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/storage/string_ids.hpp"

namespace csp::analysis {

namespace fs = std::filesystem;
using storage::MetricScope;
using storage::NodeId;

namespace {

constexpr std::size_t kE = 0, kI = 1;  // scope slots, as storage::MetricScope

// ---- one run, as far as the diff needs it ------------------------------------------------------

// Sum and number of profiles holding a value, of one (node, scope) of the compared metric.
struct Cost {
  double sum = 0;
  std::uint64_t present = 0;
};

struct RunTree {
  const storage::Database* db = nullptr;
  std::vector<storage::CctNode> nodes;
  std::vector<std::vector<NodeId>> children;
  std::vector<std::array<Cost, 2>> cost;  // per node: E, I
};

[[noreturn]] void damaged(const storage::Database& db, const std::string& what) {
  throw storage::DatabaseError(db.directory(), "damaged database: " + what);
}

const storage::StoredMetric* findMetric(const storage::Database& db, const std::string& name) {
  for (const auto& m : db.metrics())
    if (m.descriptor.name == name) return &m;
  return nullptr;
}

std::string metricList(const storage::Database& db) {
  std::string out;
  for (const auto& m : db.metrics()) out += (out.empty() ? "" : ", ") + m.descriptor.name;
  return out.empty() ? "none" : out;
}

std::string property(const storage::DatabaseMetadata& meta, const std::string& key) {
  for (const auto& s : meta.properties)
    if (s.key == key) return s.value;
  return {};
}

// The run's process count: distinct MPI ranks when the id tuples carry ranks (what the user
// chose with -np, and what csp-gen specs state), else distinct (host, pid) pairs.
double processCount(const storage::Database& db, std::string& from) {
  std::set<std::uint64_t> ranks;
  for (const auto& tuple : db.metadata().profiles)
    for (const auto& e : tuple)
      if (e.kind == IdKind::Rank) ranks.insert(e.value);
  if (!ranks.empty()) {
    from = "ranks";
    return static_cast<double>(ranks.size());
  }
  from = "processes";
  return static_cast<double>(db.metadata().processCount);
}

// Reads the CCT and the compared metric's summaries, checking what a damaged database could
// get wrong: missing nodes, parents that do not lead to the root, undecodable accumulators.
RunTree loadRun(const storage::Database& db, storage::MetricId metric) {
  RunTree run;
  run.db = &db;
  const auto count = db.metadata().nodeCount;
  if (count == 0) damaged(db, "the canonical CCT is empty (node count 0)");
  run.nodes.resize(count);
  run.children.resize(count);
  run.cost.resize(count);
  // One scan; readCct checks that every node is there and that parents and strings are in range.
  run.nodes = db.readCct();
  for (NodeId id = 0; id < count; ++id) {
    const auto& node = run.nodes[id];
    if (static_cast<unsigned>(node.kind) > static_cast<unsigned>(ScopeKind::Stmt))
      damaged(db, fmt::format("CCT node {} has unknown kind {}", id, static_cast<unsigned>(node.kind)));
    if (id == 0) {
      if (node.kind != ScopeKind::Root || node.parent != kNoIndex) damaged(db, "CCT node 0 is not the root");
    } else {
      if (node.kind == ScopeKind::Root || node.parent >= count || node.parent == id)
        damaged(db, fmt::format("CCT node {} has no valid parent", id));
      run.children[node.parent].push_back(id);
    }
  }
  // Every node must hang below the root: a cycle of parents would otherwise go unnoticed.
  std::vector<NodeId> stack{0};
  std::size_t reached = 0;
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    ++reached;
    for (auto c : run.children[id]) stack.push_back(c);
  }
  if (reached != count) damaged(db, fmt::format("{} of {} CCT nodes are not below the root", count - reached, count));

  const bool real = db.metrics()[metric].valueType == storage::ValueType::Real;
  db.forEachSummary([&](NodeId id, storage::MetricId m, MetricScope scope, std::string_view bytes) {
    if (m != metric) return;
    if (id >= count) damaged(db, fmt::format("a summary of CCT node {} beyond the node count {}", id, count));
    Cost& c = run.cost[id][static_cast<std::size_t>(scope)];
    try {
      if (real) {
        const auto acc = metrics::decodeRealAccumulator(bytes);
        c = {acc.mean() * static_cast<double>(acc.count()), acc.count()};
      } else {
        const auto acc = metrics::decodeIntAccumulator(bytes);
        c = {static_cast<double>(acc.sum()), acc.count()};
      }
    } catch (const std::exception& e) {
      damaged(db, fmt::format("summary of CCT node {} ({}, {}): {}", id, db.metrics()[metric].descriptor.name,
                              scope == MetricScope::Exclusive ? "E" : "I", e.what()));
    }
  });
  return run;
}

// ---- matching ----------------------------------------------------------------------------------

// A node's symbolic identity below its parent. Modules compare by base name: the same library
// loaded from another install prefix is the same code. Ordered by text, so union ids do not
// depend on either run's string ids.
struct SymbolicKey {
  ScopeKind kind = ScopeKind::Root;
  std::string name, file;
  std::uint32_t line = 0;
  std::string moduleBase;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14's false positive on a defaulted <=>
  auto operator<=>(const SymbolicKey&) const = default;
};

SymbolicKey keyOf(const RunTree& run, NodeId id) {
  const auto& n = run.nodes[id];
  const auto& s = run.db->metadata().strings;
  return {n.kind, s[n.name], s[n.file], n.line, fs::path(s[n.module]).filename().string()};
}

struct Source {
  std::size_t run;  // 0 = P, 1 = Q
  NodeId node;
};

// Both runs' costs of one union node; several nodes of one run can fall on one union node when
// they differ only in what matching ignores (a module's directory), and then they add up.
struct Sides {
  std::array<bool, 2> present{};
  std::array<std::array<Cost, 2>, 2> cost{};  // [run][scope]
};

void checkMetricPair(const storage::Database& p, const storage::Database& q, const std::string& name) {
  const auto* mp = findMetric(p, name);
  const auto* mq = findMetric(q, name);
  if (!mp) throw DiffError(fmt::format("{}: no metric '{}' (it has: {})", p.directory().string(), name, metricList(p)));
  if (!mq) throw DiffError(fmt::format("{}: no metric '{}' (it has: {})", q.directory().string(), name, metricList(q)));
  if (mp->descriptor.unit != mq->descriptor.unit)
    throw DiffError(fmt::format("metric '{}' has unit '{}' in {} but '{}' in {}: the runs measured different things",
                                name, mp->descriptor.unit, p.directory().string(), mq->descriptor.unit,
                                q.directory().string()));
}

std::string chooseMetric(const storage::Database& p, const storage::Database& q, const std::string& requested) {
  if (!requested.empty()) {
    checkMetricPair(p, q, requested);
    return requested;
  }
  std::vector<std::string> common;
  for (const auto& m : p.metrics())
    if (findMetric(q, m.descriptor.name)) common.push_back(m.descriptor.name);
  if (common.empty())
    throw DiffError(fmt::format("no metric in common: {} has {}; {} has {}", p.directory().string(), metricList(p),
                                q.directory().string(), metricList(q)));
  // The main time metric: csp-run's default event first (it is what every run has).
  std::string chosen = common.front();
  for (const char* preferred : {"cpu-time", "real-time"}) {
    if (std::find(common.begin(), common.end(), preferred) != common.end()) {
      chosen = preferred;
      break;
    }
  }
  checkMetricPair(p, q, chosen);
  return chosen;
}

DiffRun describeRun(const storage::Database& db, const storage::StoredMetric& metric, std::optional<double> override) {
  DiffRun r;
  r.database = db.directory();
  r.title = db.metadata().title;
  r.profiles = db.metadata().profiles.size();
  r.nodes = db.metadata().nodeCount;
  r.skippedInputs = db.metadata().skipped.size();
  r.period = metric.descriptor.period;
  r.sampled = metric.descriptor.kind == MetricKind::Sampled && metric.valueType == storage::ValueType::Count;
  if (override) {
    r.processes = *override;
    r.processesFrom = "option";
  } else {
    r.processes = processCount(db, r.processesFrom);
  }
  return r;
}

}  // namespace

fs::path resolveRunDatabase(const fs::path& run) {
  std::error_code ec;
  if (fs::exists(run / storage::kDatabaseManifestName, ec)) return run;
  if (fs::is_directory(run / "db", ec)) return run / "db";
  if (!fs::exists(run, ec)) throw DiffError(fmt::format("{}: no such run or database", run.string()));
  throw DiffError(fmt::format("{}: neither a CSP database (no {} manifest) nor a run directory holding db/",
                              run.string(), storage::kDatabaseManifestName));
}

ScalingDiff computeScalingDiff(const storage::Database& dbP, const storage::Database& dbQ, const DiffOptions& options) {
  {
    std::error_code ec;
    if (fs::equivalent(dbP.directory(), dbQ.directory(), ec))
      throw DiffError(fmt::format("{} and {} are the same run: compare two runs at different scales",
                                  dbP.directory().string(), dbQ.directory().string()));
  }
  for (const auto* db : {&dbP, &dbQ})
    if (property(db->metadata(), "generator") == "csp-diff")
      throw DiffError(fmt::format("{}: is a csp-diff result, not a run", db->directory().string()));

  ScalingDiff d;
  d.metric = chooseMetric(dbP, dbQ, options.metric);
  const auto* metricP = findMetric(dbP, d.metric);
  const auto* metricQ = findMetric(dbQ, d.metric);
  d.unit = metricP->descriptor.unit;
  d.runP = describeRun(dbP, *metricP, options.p);
  d.runQ = describeRun(dbQ, *metricQ, options.q);
  if (!(d.runP.processes > 0) || !(d.runQ.processes > 0) || !std::isfinite(d.runP.processes) ||
      !std::isfinite(d.runQ.processes))
    throw DiffError(fmt::format("process counts must be positive (p = {}, q = {}); give --p and --q", d.runP.processes,
                                d.runQ.processes));
  if (d.runP.processes >= d.runQ.processes)
    throw DiffError(fmt::format(
        "p = {} ({}, {}) is not smaller than q = {} ({}, {}): give the smaller run first, or set --p and --q",
        d.runP.processes, d.runP.processesFrom, dbP.directory().string(), d.runQ.processes, d.runQ.processesFrom,
        dbQ.directory().string()));
  d.study.mode = options.mode;
  d.study.p = d.runP.processes;
  d.study.q = d.runQ.processes;

  const std::array<RunTree, 2> runs{loadRun(dbP, static_cast<storage::MetricId>(metricP - dbP.metrics().data())),
                                    loadRun(dbQ, static_cast<storage::MetricId>(metricQ - dbQ.metrics().data()))};

  // Union of the two trees in preorder, children by key text: each stack entry is one union
  // node and the run nodes that match it.
  struct Pending {
    NodeId parent;
    std::vector<Source> sources;
  };
  std::vector<Pending> stack{{kNoIndex, {{0, 0}, {1, 0}}}};
  std::vector<Sides> sides;
  while (!stack.empty()) {
    Pending item = std::move(stack.back());
    stack.pop_back();
    const auto id = static_cast<NodeId>(d.nodes.size());
    DiffNode node;
    node.parent = item.parent;
    Sides s;
    // Names come from run Q when it has the node: Q is the run whose losses are being explained.
    const Source& rep = item.sources.back().run == 1 ? item.sources.back() : item.sources.front();
    {
      const auto& n = runs[rep.run].nodes[rep.node];
      const auto& text = runs[rep.run].db->metadata().strings;
      node.kind = n.kind;
      node.name = text[n.name];
      node.file = text[n.file];
      node.module = text[n.module];
      node.line = n.line;
    }
    std::map<SymbolicKey, std::vector<Source>> groups;
    for (const auto& src : item.sources) {
      s.present[src.run] = true;
      for (std::size_t scope : {kE, kI}) {
        const Cost& c = runs[src.run].cost[src.node][scope];
        s.cost[src.run][scope].sum += c.sum;
        s.cost[src.run][scope].present += c.present;
      }
      for (auto child : runs[src.run].children[src.node])
        groups[keyOf(runs[src.run], child)].push_back({src.run, child});
    }
    node.presence = s.present[0] && s.present[1] ? Presence::Both : s.present[0] ? Presence::OnlyP : Presence::OnlyQ;
    d.onlyP += node.presence == Presence::OnlyP;
    d.onlyQ += node.presence == Presence::OnlyQ;
    d.nodes.push_back(std::move(node));
    sides.push_back(s);
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) stack.push_back({id, std::move(it->second)});
  }

  d.study.rootSumQ = sides[0].cost[1][kI].sum;
  if (!(d.study.rootSumQ > 0))
    throw DiffError(fmt::format("{}: no {} values at all: nothing to compare", dbQ.directory().string(), d.metric));
  if (!(sides[0].cost[0][kI].sum > 0))
    throw DiffError(fmt::format("{}: no {} values at all: nothing to compare", dbP.directory().string(), d.metric));

  auto bound = [](const DiffRun& run, const Cost& c) {
    return run.sampled ? metrics::samplingErrorBound(c.present, run.period) : 0.0;
  };
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    for (std::size_t scope : {kE, kI}) {
      const Cost& cp = sides[i].cost[0][scope];
      const Cost& cq = sides[i].cost[1][scope];
      ScopeDiff& x = scope == kE ? d.nodes[i].exclusive : d.nodes[i].inclusive;
      x.sumP = cp.sum;
      x.sumQ = cq.sum;
      x.measured = cp.present + cq.present > 0;
      x.excess = metrics::scalingExcess(d.study, cp.sum, cq.sum);
      x.loss = metrics::scalingLossPercent(d.study, x.excess);
      const double boundP = bound(d.runP, cp), boundQ = bound(d.runQ, cq);
      // The excess is off by at most this much: run P's sum overestimated by its bound and run
      // Q's underestimated by its bound, scaled as the excess itself is.
      x.noise = metrics::scalingExcess(d.study, -boundP, boundQ);
      x.withinNoise = x.noise > 0 && metrics::withinSamplingNoise(d.study, x.excess, boundP, boundQ);
    }
  }
  const double totalExcess = d.nodes[0].inclusive.excess;
  for (auto& n : d.nodes)
    for (ScopeDiff* x : {&n.exclusive, &n.inclusive})
      x->share = totalExcess != 0 ? 100.0 * x->excess / totalExcess : std::nan("");
  return d;
}

// ---- the result database -----------------------------------------------------------------------

namespace {

enum DiffMetric : storage::MetricId { kLoss, kShare, kExcess, kSumP, kSumQ, kNoise, kOnlyP, kOnlyQ, kMetricCount };

std::string modeName(metrics::ScalingMode mode) { return mode == metrics::ScalingMode::Strong ? "strong" : "weak"; }

std::vector<storage::StoredMetric> diffMetrics(const ScalingDiff& d) {
  const std::string excessUnit = d.study.mode == metrics::ScalingMode::Strong ? d.unit : d.unit + " per process";
  const std::string reference = d.study.mode == metrics::ScalingMode::Strong
                                    ? "the q run's total " + d.metric
                                    : "the q run's total " + d.metric + " per process";
  auto real = [](std::string name, std::string unit, std::string description) {
    return storage::StoredMetric{{std::move(name), std::move(unit), MetricKind::Counted, 1, std::move(description)},
                                 storage::ValueType::Real};
  };
  std::vector<storage::StoredMetric> m(kMetricCount);
  const auto& names = diffMetricNames();
  m[kLoss] = real(names[kLoss], "%", "scaling loss: 100 * excess / " + reference + " (negative: gain)");
  m[kShare] = real(names[kShare], "%", "share of the total loss: 100 * excess / excess at the root (inclusive)");
  m[kExcess] =
      real(names[kExcess], excessUnit,
           d.study.mode == metrics::ScalingMode::Strong ? "excess work: sum(q run) - sum(p run) of " + d.metric
                                                        : "excess work: sum(q run)/q - sum(p run)/p of " + d.metric);
  m[kSumP] = real(names[kSumP], d.unit, d.metric + " summed over all profiles of the p run");
  m[kSumQ] = real(names[kSumQ], d.unit, d.metric + " summed over all profiles of the q run");
  m[kNoise] = real(names[kNoise], excessUnit,
                   "worst-case sampling error of excess (thesis Eq. A.10); |excess| <= noise may be noise");
  m[kOnlyP] =
      real(names[kOnlyP], "contexts", "contexts only in the p run: E 1 at such a node, I the count in its subtree");
  m[kOnlyQ] =
      real(names[kOnlyQ], "contexts", "contexts only in the q run: E 1 at such a node, I the count in its subtree");
  return m;
}

std::string encodeOne(double value) {
  metrics::RealAccumulator acc;
  acc.accumulate(0, value);
  return metrics::encode(acc);
}

}  // namespace

const std::vector<std::string>& diffMetricNames() {
  static const std::vector<std::string> names{"loss", "share", "excess", "sum-p", "sum-q", "noise", "only-p", "only-q"};
  return names;
}

void writeDiffDatabase(const ScalingDiff& d, const fs::path& target, bool force) {
  const auto count = static_cast<NodeId>(d.nodes.size());
  // Subtree counts of one-run-only nodes: preorder ids put children after parents, so one
  // reverse pass adds each node into its parent.
  std::vector<std::array<double, 2>> onlyIn(count, {0, 0});
  for (NodeId i = count; i-- > 0;) {
    if (d.nodes[i].presence == Presence::OnlyP) onlyIn[i][0] += 1;
    if (d.nodes[i].presence == Presence::OnlyQ) onlyIn[i][1] += 1;
    if (i > 0)
      for (std::size_t r : {0, 1}) onlyIn[d.nodes[i].parent][r] += onlyIn[i][r];
  }

  storage::DatabaseBuilder builder(target, storage::BuildOptions{force, {}});
  storage::StringIds strings;
  std::vector<storage::CctNode> cct(count);
  for (NodeId i = 0; i < count; ++i) {
    const auto& n = d.nodes[i];
    cct[i] = {n.parent, n.kind, strings.id(n.name), strings.id(n.file), strings.id(n.module), n.line};
  }
  storage::ShardWriter shard(builder.stagingDir(), 0);
  shard.putCct(cct);
  shard.putRegion(0, {kNoIndex, 0, 0});

  std::vector<storage::ProfileValue> byProfile;
  std::vector<storage::NodeValue> byNode;
  for (NodeId i = 0; i < count; ++i) {
    const auto& n = d.nodes[i];
    // (metric, scope) -> value, only where the value exists (see docs/diff.md for when).
    std::vector<std::tuple<storage::MetricId, MetricScope, double>> values;
    for (auto scope : {MetricScope::Exclusive, MetricScope::Inclusive}) {
      const ScopeDiff& x = scope == MetricScope::Exclusive ? n.exclusive : n.inclusive;
      if (x.measured) {
        values.emplace_back(kLoss, scope, x.loss);
        if (std::isfinite(x.share)) values.emplace_back(kShare, scope, x.share);
        values.emplace_back(kExcess, scope, x.excess);
        if (x.sumP != 0) values.emplace_back(kSumP, scope, x.sumP);
        if (x.sumQ != 0) values.emplace_back(kSumQ, scope, x.sumQ);
        if (x.noise != 0) values.emplace_back(kNoise, scope, x.noise);
      }
      const double onlyP = scope == MetricScope::Exclusive ? (n.presence == Presence::OnlyP) : onlyIn[i][0];
      const double onlyQ = scope == MetricScope::Exclusive ? (n.presence == Presence::OnlyQ) : onlyIn[i][1];
      if (onlyP != 0) values.emplace_back(kOnlyP, scope, onlyP);
      if (onlyQ != 0) values.emplace_back(kOnlyQ, scope, onlyQ);
    }
    std::sort(values.begin(), values.end());
    byNode.clear();
    for (const auto& [metric, scope, value] : values) {
      shard.putSummary(i, metric, scope, encodeOne(value));
      // The pseudo-profile's per-thread value: the double's bit pattern (ValueType::Real);
      // zeros (and -0) are not stored, as everywhere.
      const double v = value == 0 ? 0.0 : value;
      const auto bits = std::bit_cast<std::uint64_t>(v);
      if (bits == 0) continue;
      byProfile.push_back({i, metric, scope, bits});
      byNode.push_back({metric, scope, 0, bits});
    }
    shard.putNodeValues(i, byNode);
  }
  shard.putProfileValues(0, byProfile);
  shard.finish();

  const auto& mp = d.runP;
  const auto& mq = d.runQ;
  storage::DatabaseMetadata meta;
  meta.title = fmt::format("csp-diff: {} scaling loss of {} from {} (p = {}) to {} (q = {})", modeName(d.study.mode),
                           d.metric, mp.title.empty() ? mp.database.string() : mp.title, mp.processes,
                           mq.title.empty() ? mq.database.string() : mq.title, mq.processes);
  meta.processCount = 1;
  meta.threadCount = 1;
  meta.nodeCount = count;
  meta.regionCount = 1;
  meta.metrics = diffMetrics(d);
  meta.profiles = {IdTuple{}};
  meta.strings = strings.take();
  const auto& total = d.total();
  meta.properties = {
      {"generator", "csp-diff"},
      {"diff.mode", modeName(d.study.mode)},
      {"diff.metric", d.metric},
      {"diff.unit", d.unit},
      {"diff.p", fmt::format("{}", mp.processes)},
      {"diff.p-from", mp.processesFrom},
      {"diff.q", fmt::format("{}", mq.processes)},
      {"diff.q-from", mq.processesFrom},
      {"diff.run-p", fs::absolute(mp.database).lexically_normal().string()},
      {"diff.run-q", fs::absolute(mq.database).lexically_normal().string()},
      {"diff.run-p-title", mp.title},
      {"diff.run-q-title", mq.title},
      {"diff.total-p", fmt::format("{}", total.sumP)},
      {"diff.total-q", fmt::format("{}", total.sumQ)},
      {"diff.total-excess", fmt::format("{}", total.excess)},
      {"diff.total-loss-percent", fmt::format("{}", total.loss)},
      {"diff.only-p-contexts", std::to_string(d.onlyP)},
      {"diff.only-q-contexts", std::to_string(d.onlyQ)},
      {"diff.profile-0", "the difference of the two runs (one pseudo-profile; see docs/diff.md)"},
  };
  builder.writeMetadata(meta);
  builder.ingestShards(1);
  builder.publish();
}

}  // namespace csp::analysis

namespace csp::analysis {

namespace {

double numberProperty(const storage::Database& db, const std::string& key) {
  const auto text = property(db.metadata(), key);
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  damaged(db, fmt::format("csp-diff property {} is '{}', not a number", key, text));
}

DiffRun runOf(const storage::Database& db, const std::string& which) {
  DiffRun r;
  r.database = property(db.metadata(), "diff.run-" + which);
  r.title = property(db.metadata(), "diff.run-" + which + "-title");
  r.processes = numberProperty(db, "diff." + which);
  r.processesFrom = property(db.metadata(), "diff." + which + "-from");
  return r;
}

}  // namespace

ScalingDiff readScalingDiff(const storage::Database& db) {
  const auto& meta = db.metadata();
  if (property(meta, "generator") != "csp-diff")
    throw DiffError(fmt::format("{}: is no csp-diff result (csp-diff -o writes one)", db.directory().string()));
  const auto& names = diffMetricNames();
  if (meta.metrics.size() != names.size())
    damaged(db, fmt::format("a csp-diff result has {} metrics, not {}", names.size(), meta.metrics.size()));
  for (std::size_t m = 0; m < names.size(); ++m)
    if (meta.metrics[m].descriptor.name != names[m])
      damaged(db, fmt::format("metric {} of a csp-diff result is not {}", m, names[m]));

  ScalingDiff d;
  d.readBack = true;
  d.metric = property(meta, "diff.metric");
  d.unit = property(meta, "diff.unit");
  d.study.mode = property(meta, "diff.mode") == "weak" ? metrics::ScalingMode::Weak : metrics::ScalingMode::Strong;
  d.runP = runOf(db, "p");
  d.runQ = runOf(db, "q");
  d.study.p = d.runP.processes;
  d.study.q = d.runQ.processes;
  for (const auto& n : db.readCct()) {
    DiffNode node;
    node.parent = n.parent;
    node.kind = n.kind;
    node.name = meta.strings.at(n.name);
    node.file = meta.strings.at(n.file);
    node.module = meta.strings.at(n.module);
    node.line = n.line;
    d.nodes.push_back(std::move(node));
  }
  if (d.nodes.empty()) damaged(db, "a csp-diff result without CCT");
  // Summaries hold every value written (profile 0's values leave out zeros); a loss is written
  // exactly where the scope was measured, a share where it was finite (docs/diff.md).
  std::vector<std::array<bool, 2>> shareStored(d.nodes.size(), {false, false});
  db.forEachSummary([&](NodeId node, storage::MetricId metric, MetricScope scope, std::string_view bytes) {
    if (node >= d.nodes.size()) damaged(db, fmt::format("summary of node {} beyond the CCT", node));
    ScopeDiff& x = scope == MetricScope::Exclusive ? d.nodes[node].exclusive : d.nodes[node].inclusive;
    const double v = metrics::decodeRealAccumulator(bytes).mean();
    switch (metric) {
      case kLoss:
        x.loss = v, x.measured = true;
        break;
      case kShare:
        x.share = v, shareStored[node][static_cast<std::size_t>(scope)] = true;
        break;
      case kExcess:
        x.excess = v;
        break;
      case kSumP:
        x.sumP = v;
        break;
      case kSumQ:
        x.sumQ = v;
        break;
      case kNoise:
        x.noise = v;
        break;
      case kOnlyP:
        if (scope == MetricScope::Exclusive && v == 1) d.nodes[node].presence = Presence::OnlyP;
        break;
      case kOnlyQ:
        if (scope == MetricScope::Exclusive && v == 1) d.nodes[node].presence = Presence::OnlyQ;
        break;
      default:
        break;
    }
  });
  const double totalExcess = d.nodes[0].inclusive.excess;
  for (NodeId i = 0; i < d.nodes.size(); ++i) {
    auto& n = d.nodes[i];
    d.onlyP += n.presence == Presence::OnlyP;
    d.onlyQ += n.presence == Presence::OnlyQ;
    for (auto scope : {MetricScope::Exclusive, MetricScope::Inclusive}) {
      ScopeDiff& x = scope == MetricScope::Exclusive ? n.exclusive : n.inclusive;
      if (!shareStored[i][static_cast<std::size_t>(scope)])
        x.share = totalExcess != 0 ? 100.0 * x.excess / totalExcess : std::nan("");
      x.withinNoise = x.noise > 0 && std::fabs(x.excess) <= x.noise;
    }
  }
  d.study.rootSumQ = d.nodes[0].inclusive.sumQ;
  // The runs' sampling is not stored; a noise at the root says that either run has an error.
  d.runP.sampled = d.runQ.sampled = d.nodes[0].inclusive.noise > 0;
  return d;
}

void checkDiffOutput(const fs::path& output, const std::vector<std::pair<std::string, fs::path>>& inputs) {
  std::error_code ec;
  for (const auto& [given, db] : inputs) {
    for (const fs::path& input : {fs::path(given), db})
      if (fs::equivalent(output, input, ec) && !ec)
        throw DiffError(fmt::format("{}: is the input {}; csp-diff never writes over its inputs: choose another -o",
                                    output.string(), given));
    // Nor into one: a directory inside an input database would change it.
    const fs::path absolute = fs::absolute(output, ec);
    for (fs::path up = absolute.parent_path(); !ec && !up.empty(); up = up.parent_path()) {
      std::error_code ignore;
      if (fs::equivalent(up, db, ignore) && !ignore)
        throw DiffError(
            fmt::format("{}: is inside the input {}; csp-diff never writes over its inputs: choose another -o",
                        output.string(), given));
      if (up == up.parent_path()) break;
    }
  }
}

}  // namespace csp::analysis
