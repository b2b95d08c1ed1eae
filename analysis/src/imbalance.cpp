// Load-imbalance cause attribution (imbalance.hpp, docs/views.md).
#include "csp/analysis/imbalance.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "csp/metrics/encoding.hpp"

namespace csp::analysis {

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// --- the F distribution --------------------------------------------------------------------------

// Continued fraction of the regularized incomplete beta function (modified Lentz's method).
double betaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + num * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + num / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + num * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + num / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < kEps) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double incompleteBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * betaContinuedFraction(a, b, x) / a;
  return 1 - front * betaContinuedFraction(b, a, 1 - x) / b;
}


// --- the data ------------------------------------------------------------------------------------

struct Tree {
  std::vector<storage::CctNode> nodes;
  std::vector<std::vector<storage::NodeId>> children;
  const std::vector<std::string>* strings = nullptr;

  std::string label(storage::NodeId id) const {
    const auto& n = nodes[id];
    const auto& s = *strings;
    auto where = [&] { return s[n.file].empty() ? fmt::format("?:{}", n.line) : fmt::format("{}:{}", s[n.file], n.line); };
    switch (n.kind) {
      case ScopeKind::Root: return "<program root>";
      case ScopeKind::ProcFrame: return s[n.name];
      case ScopeKind::Alien: return "inlined " + s[n.name];
      case ScopeKind::Loop: return "loop " + where();
      case ScopeKind::CallSite: return "call " + where();
      case ScopeKind::Stmt: return where();
    }
    return "?";
  }
  // Procedure names from the root down to the node's enclosing procedure: "main/solve".
  std::string path(storage::NodeId id) const {
    std::vector<std::string> names;
    for (auto n = id; n != 0 && n != kNoIndex; n = nodes[n].parent)
      if (nodes[n].kind == ScopeKind::ProcFrame) names.push_back((*strings)[nodes[n].name]);
    std::string out;
    for (auto it = names.rbegin(); it != names.rend(); ++it) out += (out.empty() ? "" : "/") + *it;
    return out;
  }
  bool isAncestor(storage::NodeId a, storage::NodeId b) const {  // a strictly above b
    for (auto n = nodes[b].parent; n != kNoIndex; n = nodes[n].parent)
      if (n == a) return true;
    return false;
  }
};

double covariance(const VectorXd& a, const VectorXd& b) {
  return ((a.array() - a.mean()) * (b.array() - b.mean())).sum() / static_cast<double>(a.size());
}

double correlation(const VectorXd& a, const VectorXd& b) {
  const double sa = std::sqrt(covariance(a, a)), sb = std::sqrt(covariance(b, b));
  return sa > 0 && sb > 0 ? covariance(a, b) / (sa * sb) : 0;
}

VectorXd standardized(const VectorXd& v) {
  const double sd = std::sqrt(covariance(v, v));
  if (!(sd > 0)) return VectorXd::Zero(v.size());
  return (v.array() - v.mean()) / sd;
}

// Residual sum of squares of y regressed on the columns of X (both centered: no intercept),
// and the coefficients.
double leastSquares(const MatrixXd& x, const VectorXd& y, VectorXd* coefficients) {
  if (x.cols() == 0) {
    if (coefficients) coefficients->resize(0);
    return y.squaredNorm();
  }
  const VectorXd beta = x.colPivHouseholderQr().solve(y);
  if (coefficients) *coefficients = beta;
  return (y - x * beta).squaredNorm();
}

}  // namespace

double fTestPValue(double f, double d1, double d2) {
  if (!(f > 0)) return 1;
  if (std::isinf(f)) return 0;
  return incompleteBeta(d2 / 2, d1 / 2, d2 / (d2 + d1 * f));
}

ImbalanceReport analyzeImbalance(const storage::Database& db, const ImbalanceOptions& o) {
  const auto& meta = db.metadata();
  ImbalanceReport report;

  // Metric.
  std::optional<storage::MetricId> metric;
  for (std::size_t m = 0; m < meta.metrics.size(); ++m)
    if (o.metric.empty() ? m == 0 : meta.metrics[m].descriptor.name == o.metric) metric = static_cast<storage::MetricId>(m);
  if (!metric) throw std::invalid_argument(fmt::format("unknown metric '{}'", o.metric));
  if (meta.metrics[*metric].valueType != storage::ValueType::Count)
    throw std::invalid_argument(fmt::format("metric '{}' is real-valued; the imbalance analysis needs a raw metric",
                                            meta.metrics[*metric].descriptor.name));
  report.metric = meta.metrics[*metric].descriptor.name;
  report.unit = meta.metrics[*metric].descriptor.unit;

  // Threads: by default the worker threads when there are several (the threads that share the
  // parallel work; a process's first thread often runs serial parts the workers never see), else
  // the views' default (the main threads of the ranks).
  std::string threads = o.threads;
  if (threads.empty()) {
    std::size_t workers = 0;
    for (const auto& c : meta.threadClasses) workers += c.threadClass == storage::ThreadClass::Worker;
    if (workers >= 2) threads = "worker";
  }
  const auto selection = storage::selectThreads(meta, threads);
  report.threadsLabel = selection.label;
  auto selected = [&](storage::ProfileId p) {
    return selection.all || selection.covers(meta.threadClasses.at(p).threadClass);
  };

  // The tree and the section's roots: outermost contexts of the procedure, or the node.
  Tree tree;
  tree.nodes = db.readCct();
  tree.strings = &meta.strings;
  tree.children.resize(tree.nodes.size());
  for (std::size_t i = 1; i < tree.nodes.size(); ++i) tree.children[tree.nodes[i].parent].push_back(static_cast<storage::NodeId>(i));
  std::vector<storage::NodeId> roots;
  const bool regionSection = o.section.rfind("region:", 0) == 0;
  std::vector<char> sectionRegions;  // region tree nodes of the region section's name
  std::vector<storage::RegionLogProcess> regionLogs;
  if (regionSection) {
    // A region: its threads' time in it comes from the region event logs; the contexts are the
    // whole CCT's (samples are not tagged with regions).
    const std::string name = o.section.substr(7);
    const auto regionNodes = db.regions();
    sectionRegions.assign(regionNodes.size(), 0);
    bool any = false;
    for (std::size_t r = 1; r < regionNodes.size(); ++r)
      if (regionNodes[r].name < meta.strings.size() && meta.strings[regionNodes[r].name] == name) sectionRegions[r] = 1, any = true;
    if (!any) throw std::invalid_argument(fmt::format("section {}: no region of this name in the database", o.section));
    if (db.hasRegionLogFamily()) regionLogs = db.regionLogProcesses();
    if (regionLogs.empty())
      throw std::invalid_argument(fmt::format(
          "section {}: the database has no region event logs, which give each thread's time in a region "
          "(measure with csp-run --region-log)",
          o.section));
    roots = {0};
  } else if (o.section.empty()) {
    roots = {0};
  } else if (std::all_of(o.section.begin(), o.section.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const auto id = o.section.size() > 10 ? std::uint64_t{UINT64_MAX} : std::stoull(o.section);
    if (id >= tree.nodes.size()) throw std::invalid_argument(fmt::format("section {}: no such CCT node", o.section));
    roots = {static_cast<storage::NodeId>(id)};
  } else {
    std::vector<char> member(tree.nodes.size(), 0);
    for (std::size_t i = 0; i < tree.nodes.size(); ++i)
      if (tree.nodes[i].kind == ScopeKind::ProcFrame && meta.strings[tree.nodes[i].name] == o.section) member[i] = 1;
    for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
      if (!member[i]) continue;
      bool outermost = true;
      for (auto p = tree.nodes[i].parent; p != kNoIndex && outermost; p = tree.nodes[p].parent) outermost = !member[p];
      if (outermost) roots.push_back(static_cast<storage::NodeId>(i));
    }
    if (roots.empty()) throw std::invalid_argument(fmt::format("section '{}': no procedure of this name in the CCT", o.section));
  }
  report.section = regionSection ? fmt::format("region {}", o.section.substr(7))
                   : o.section.empty() ? "<program root>"
                   : roots.size() == 1 ? tree.label(roots[0])
                                       : fmt::format("{} ({} contexts)", o.section, roots.size());

  // Per-thread section time T over the threads where the section is present.
  auto perThread = [&](storage::NodeId node) {
    std::unordered_map<storage::ProfileId, double> out;
    for (const auto& v : db.nodeValues(node, *metric, storage::MetricScope::Inclusive))
      if (v.profile < meta.profiles.size() && selected(v.profile)) out[v.profile] += static_cast<double>(v.value);
    return out;
  };
  std::map<storage::ProfileId, double> sectionTime;
  if (regionSection) {
    // Each thread's time inside any instance of the region (nested instances counted once), from
    // its enter and leave events; a visit still open at the end of the log is not counted.
    std::size_t threadsWithLostEvents = 0;
    for (const auto& process : regionLogs) {
      for (const auto& thread : process.threads) {
        if (thread.profile >= meta.profiles.size() || !selected(thread.profile)) continue;
        if (thread.eventsLost > 0) ++threadsWithLostEvents;
        auto cursor = db.regionLog(process.process, thread.profile);
        storage::RegionLogEvent e;
        std::uint64_t depth = 0, since = 0;
        double total = 0;
        while (cursor->next(e)) {
          if (e.region >= sectionRegions.size() || !sectionRegions[e.region]) continue;
          if (e.enter) {
            if (depth++ == 0) since = e.timeNs;
          } else if (depth > 0 && --depth == 0 && e.timeNs > since) {
            total += static_cast<double>(e.timeNs - since);
          }
        }
        if (total > 0) sectionTime[thread.profile] += total;
      }
    }
    if (threadsWithLostEvents > 0)
      report.notes.push_back(fmt::format("{} thread{} lost region events (a full log, csp-run --region-log-events): their "
                                         "time in the region is a lower bound",
                                         threadsWithLostEvents, threadsWithLostEvents == 1 ? "" : "s"));
    report.unit = "ns";
    report.sectionMeasure = "wall-clock time in the region (region event logs)";
  } else {
    for (auto r : roots)
      for (const auto& [p, v] : perThread(r)) sectionTime[p] += v;
  }
  std::vector<storage::ProfileId> samples;
  for (const auto& [p, v] : sectionTime)
    if (v > 0) samples.push_back(p);
  const std::size_t n = samples.size();
  report.threads = n;
  if (n == 0) throw std::invalid_argument(fmt::format("section {}: no thread of the selection ({}) has a value there",
                                                      report.section, selection.label));
  std::unordered_map<storage::ProfileId, std::size_t> row;
  for (std::size_t i = 0; i < n; ++i) row[samples[i]] = i;
  VectorXd t(static_cast<Eigen::Index>(n));
  for (std::size_t i = 0; i < n; ++i) t[static_cast<Eigen::Index>(i)] = sectionTime[samples[i]];
  report.sum = t.sum();
  report.mean = t.mean();
  report.max = t.maxCoeff();
  report.stddev = std::sqrt(covariance(t, t));
  report.imbalance = report.mean > 0 ? report.max / report.mean : std::numeric_limits<double>::quiet_NaN();
  {
    std::vector<SlowThread> all;
    for (std::size_t i = 0; i < n; ++i)
      all.push_back({samples[i], formatIdTuple(meta.profiles[samples[i]]), t[static_cast<Eigen::Index>(i)]});
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.value > b.value; });
    for (const auto& s : all)
      if (s.value > report.mean + report.stddev && report.slowest.size() < 10) report.slowest.push_back(s);
  }
  const double varT = covariance(t, t);

  // Candidate contexts: below the section, big enough (by their all-threads inclusive sum), and
  // not just the section again.
  std::vector<double> sumOf(tree.nodes.size(), 0);
  db.forEachSummary([&](storage::NodeId node, storage::MetricId m, storage::MetricScope scope, std::string_view value) {
    if (m != *metric || scope != storage::MetricScope::Inclusive || node >= sumOf.size()) return;
    sumOf[node] = static_cast<double>(metrics::decodeIntAccumulator(value).sum());
  });
  double sectionSum = 0;
  for (auto r : roots) sectionSum += sumOf[r];
  std::vector<storage::NodeId> inSection;
  for (auto r : roots) {
    std::vector<storage::NodeId> stack(tree.children[r].begin(), tree.children[r].end());
    while (!stack.empty()) {
      const auto id = stack.back();
      stack.pop_back();
      inSection.push_back(id);
      for (auto c : tree.children[id]) stack.push_back(c);
    }
  }
  report.contextsInSection = inSection.size();
  std::sort(inSection.begin(), inSection.end(), [&](auto a, auto b) { return sumOf[a] != sumOf[b] ? sumOf[a] > sumOf[b] : a < b; });
  VectorXd threadTotal = VectorXd::Zero(static_cast<Eigen::Index>(n));
  if (regionSection)
    for (const auto& [p, v] : perThread(0)) {
      const auto it = row.find(p);
      if (it != row.end()) threadTotal[static_cast<Eigen::Index>(it->second)] = v;
    }
  std::vector<storage::NodeId> nodes;
  std::vector<VectorXd> xs;
  for (auto id : inSection) {
    if (nodes.size() >= o.maxContexts || sumOf[id] < o.minContextShare * sectionSum) break;
    VectorXd x = VectorXd::Zero(static_cast<Eigen::Index>(n));
    for (const auto& [p, v] : perThread(id)) {
      const auto it = row.find(p);
      if (it != row.end()) x[static_cast<Eigen::Index>(it->second)] = v;
    }
    if (!(covariance(x, x) > 0)) continue;  // the same in every thread
    // The section itself in every thread that runs it (a chain of call sites and frames that
    // carries all of it, or a thread's start that only tells which threads are of which kind);
    // for a region, the threads' whole time (the program's spine).
    const VectorXd& all = regionSection ? threadTotal : t;
    const VectorXd whole = (x.array() > 0).select(all, 0.0);
    if ((whole - x).cwiseAbs().sum() <= 0.01 * all.sum()) continue;
    nodes.push_back(id);
    xs.push_back(std::move(x));
  }
  const std::size_t k = nodes.size();
  report.contextsAnalysed = k;
  if (k == 0 || !(varT > 0)) return report;

  // 1. Hierarchical clustering, average linkage over correlations.
  MatrixXd z(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(k));
  for (std::size_t c = 0; c < k; ++c) z.col(static_cast<Eigen::Index>(c)) = standardized(xs[c]);
  const MatrixXd corr = z.transpose() * z / static_cast<double>(n);
  std::vector<std::vector<std::size_t>> clusters(k);
  for (std::size_t c = 0; c < k; ++c) clusters[c] = {c};
  MatrixXd link = corr;  // average correlation between live clusters
  std::vector<char> live(k, 1);
  for (;;) {
    double best = -2;
    std::size_t a = 0, b = 0;
    for (std::size_t i = 0; i < k; ++i) {
      if (!live[i]) continue;
      for (std::size_t j = i + 1; j < k; ++j)
        if (live[j] && link(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) > best)
          best = link(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)), a = i, b = j;
    }
    if (best < o.clusterThreshold) break;
    const double na = static_cast<double>(clusters[a].size()), nb = static_cast<double>(clusters[b].size());
    for (std::size_t j = 0; j < k; ++j) {
      if (!live[j] || j == a || j == b) continue;
      const auto ai = static_cast<Eigen::Index>(a), bi = static_cast<Eigen::Index>(b), ji = static_cast<Eigen::Index>(j);
      link(ai, ji) = link(ji, ai) = (na * link(ai, ji) + nb * link(bi, ji)) / (na + nb);
    }
    clusters[a].insert(clusters[a].end(), clusters[b].begin(), clusters[b].end());
    clusters[b].clear();
    live[b] = 0;
  }
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t c = 0; c < k; ++c)
    if (live[c]) {
      std::sort(clusters[c].begin(), clusters[c].end());
      groups.push_back(std::move(clusters[c]));
    }

  // 3. Shares.
  std::vector<double> share(k), corrT(k);
  for (std::size_t c = 0; c < k; ++c) {
    share[c] = covariance(xs[c], t) / varT;
    corrT[c] = correlation(xs[c], t);
  }

  // 4. Forward selection over the clusters' averaged z-scores.
  const VectorXd y = standardized(t);
  std::vector<VectorXd> predictors;
  for (const auto& g : groups) {
    VectorXd sum = VectorXd::Zero(static_cast<Eigen::Index>(n));
    for (auto c : g) sum += z.col(static_cast<Eigen::Index>(c));
    predictors.push_back(standardized(sum / static_cast<double>(g.size())));
  }
  report.clusters.resize(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (auto c : groups[g]) report.clusters[g].members.push_back(nodes[c]);
  std::vector<std::size_t> chosen;
  std::vector<double> beta(groups.size(), 0);
  report.regression = n >= 8;
  if (report.regression) {
    double rss = leastSquares(MatrixXd(static_cast<Eigen::Index>(n), 0), y, nullptr);
    for (;;) {
      double bestF = 0, bestRss = rss;
      std::size_t best = groups.size();
      const double df = static_cast<double>(n) - static_cast<double>(chosen.size()) - 2;
      if (df < 1) break;
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (std::find(chosen.begin(), chosen.end(), g) != chosen.end() || predictors[g].squaredNorm() == 0) continue;
        MatrixXd x(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(chosen.size() + 1));
        for (std::size_t i = 0; i < chosen.size(); ++i) x.col(static_cast<Eigen::Index>(i)) = predictors[chosen[i]];
        x.col(static_cast<Eigen::Index>(chosen.size())) = predictors[g];
        const double newRss = leastSquares(x, y, nullptr);
        const double f = newRss > 1e-12 * static_cast<double>(n) ? (rss - newRss) / (newRss / df)
                                                                  : std::numeric_limits<double>::infinity();
        if (f > bestF) bestF = f, best = g, bestRss = newRss;
      }
      if (best == groups.size()) break;
      const double p = std::isinf(bestF) ? 0 : fTestPValue(bestF, 1, df);
      report.clusters[best].pValue = p;
      if (p >= o.significance) break;
      chosen.push_back(best);
      report.clusters[best].kept = true;
      rss = bestRss;
      if (rss <= 1e-12 * static_cast<double>(n)) break;  // explained completely
    }
    if (!chosen.empty()) {
      MatrixXd x(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(chosen.size()));
      for (std::size_t i = 0; i < chosen.size(); ++i) x.col(static_cast<Eigen::Index>(i)) = predictors[chosen[i]];
      VectorXd b;
      const double finalRss = leastSquares(x, y, &b);
      report.r2 = 1 - finalRss / y.squaredNorm();
      for (std::size_t i = 0; i < chosen.size(); ++i) beta[chosen[i]] = b[static_cast<Eigen::Index>(i)];
    }
  } else {
    // Too few threads for a regression: every cluster is kept with its correlation as beta.
    for (std::size_t g = 0; g < groups.size(); ++g) {
      report.clusters[g].kept = true;
      beta[g] = correlation(predictors[g], y);
    }
  }

  // 2 and 5. Leaders and focus of the kept clusters, scored and ranked.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!report.clusters[g].kept) continue;
    for (auto c : groups[g]) {
      bool outermost = true;
      for (auto d : groups[g])
        if (d != c && tree.isAncestor(nodes[d], nodes[c])) outermost = false;
      if (!outermost || share[c] < o.minShare) continue;
      ImbalanceCause cause;
      cause.leader = nodes[c];
      cause.leaderLabel = tree.label(nodes[c]);
      cause.path = tree.path(nodes[c]);
      cause.cluster = g;
      cause.share = share[c];
      cause.correlation = corrT[c];
      cause.beta = beta[g];
      cause.score = beta[g] * share[c];
      cause.mean = xs[c].mean();
      cause.max = xs[c].maxCoeff();
      // Focus: the deepest member below the leader that keeps most (80 %) of its share.
      std::size_t focus = c;
      std::size_t depth = 0;
      for (auto d : groups[g]) {
        if (d == c || !tree.isAncestor(nodes[c], nodes[d]) || share[d] < 0.8 * share[c]) continue;
        std::size_t dd = 0;
        for (auto p = nodes[d]; p != nodes[c]; p = tree.nodes[p].parent) ++dd;
        if (dd > depth) depth = dd, focus = d;
      }
      cause.focus = nodes[focus];
      cause.focusLabel = tree.label(nodes[focus]);
      std::vector<SlowThread> where;
      for (std::size_t i = 0; i < n; ++i)
        where.push_back({samples[i], formatIdTuple(meta.profiles[samples[i]]), xs[c][static_cast<Eigen::Index>(i)]});
      std::sort(where.begin(), where.end(), [](const auto& a, const auto& b) { return a.value > b.value; });
      where.resize(std::min<std::size_t>(where.size(), 5));
      cause.threads = std::move(where);
      report.causes.push_back(std::move(cause));
    }
  }
  std::sort(report.causes.begin(), report.causes.end(), [](const auto& a, const auto& b) {
    return a.score != b.score ? a.score > b.score : a.leader < b.leader;
  });
  // Causes are disjoint subtrees: one inside a higher-ranked cause is a part of it (a line of
  // the loop already named), kept with the outer cause as a detail.
  std::vector<ImbalanceCause> disjoint;
  for (auto& c : report.causes) {
    auto outer = std::find_if(disjoint.begin(), disjoint.end(), [&](const auto& d) { return tree.isAncestor(d.leader, c.leader); });
    if (outer != disjoint.end()) {
      outer->parts.push_back({c.leader, c.leaderLabel, c.share});
      continue;
    }
    disjoint.push_back(std::move(c));
  }
  report.causes = std::move(disjoint);
  return report;
}

}  // namespace csp::analysis
