// Load-imbalance cause attribution (imbalance.hpp, docs/views.md).
#include "csp/analysis/imbalance.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <unordered_map>

#include "csp/metrics/accumulator.hpp"
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

// Q(a, x) = Gamma(a, x) / Gamma(a), the upper regularized incomplete gamma function: a series
// below a + 1, a continued fraction (modified Lentz) above.
double upperIncompleteGamma(double a, double x) {
  if (!(x > 0)) return 1;
  const double front = std::exp(-x + a * std::log(x) - std::lgamma(a));
  if (x < a + 1) {
    double term = 1 / a, sum = term;
    for (int k = 1; k < 10000 && std::fabs(term) > std::fabs(sum) * 1e-16; ++k) {
      term *= x / (a + k);
      sum += term;
    }
    return std::max(0.0, 1 - front * sum);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < 1e-16) break;
  }
  return front * h;
}

// --- the tree ------------------------------------------------------------------------------------

bool isStaticScope(ScopeKind kind) {
  return kind == ScopeKind::ProcFrame || kind == ScopeKind::Alien || kind == ScopeKind::Loop;
}

struct Tree {
  std::vector<storage::CctNode> nodes;
  std::vector<std::vector<storage::NodeId>> children;
  const std::vector<std::string>* strings = nullptr;

  std::string where(const storage::CctNode& n) const {
    const auto& file = (*strings)[n.file];
    return file.empty() ? std::string() : fmt::format("{}:{}", file, n.line);
  }
  std::string label(storage::NodeId id) const {
    const auto& n = nodes[id];
    const auto& s = *strings;
    switch (n.kind) {
      case ScopeKind::Root:
        return "<program root>";
      case ScopeKind::ProcFrame:
        return s[n.name];
      case ScopeKind::Alien:
        return "inlined " + s[n.name];
      // Code without lines is known by address: a loop by its header ("loop @0x1160 in libz.so"),
      // a statement or call by its offset in the procedure ("+0x24"), kept in the name.
      case ScopeKind::Loop:
        return !s[n.name].empty() ? s[n.name] : where(n).empty() ? "loop" : "loop " + where(n);
      case ScopeKind::CallSite: {
        if (!where(n).empty()) return "call " + where(n);
        // A call without a line: name it by what it calls, else by its offset.
        const auto& callees = children[id];
        if (callees.size() == 1 && nodes[callees[0]].kind == ScopeKind::ProcFrame)
          return "call to " + s[nodes[callees[0]].name];
        return !s[n.name].empty() ? "call " + s[n.name] : "call";
      }
      case ScopeKind::Stmt:
        return !where(n).empty() ? where(n) : !s[n.name].empty() ? s[n.name] : "line";
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

// --- statistics ----------------------------------------------------------------------------------

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

// --- the stages ----------------------------------------------------------------------------------

// How exact the contexts' values are: one period of error for a sampled metric (App. A), none for
// a counted one.
struct CostModel {
  double period = 1;
  bool sampled = false;
  double samplingError = 0;  // period - 1 for a sampled metric
  bool real = false;         // values are doubles (hpcrun's seconds), taken as exact
  double value(std::uint64_t bits) const { return real ? realValue(bits) : static_cast<double>(bits); }
  double summarySum(std::string_view accumulator) const {
    if (!real) return static_cast<double>(metrics::decodeIntAccumulator(accumulator).sum());
    const auto a = metrics::decodeRealAccumulator(accumulator);
    return a.mean() * static_cast<double>(a.count());
  }
};

CostModel costModel(const storage::StoredMetric& stored) {
  CostModel c;
  c.real = stored.valueType == storage::ValueType::Real;
  c.sampled = stored.descriptor.kind != MetricKind::Counted && !c.real;
  c.period = static_cast<double>(std::max<std::uint64_t>(stored.descriptor.period, 1));
  c.samplingError = c.sampled ? c.period - 1 : 0;
  return c;
}

storage::MetricId resolveMetric(const storage::DatabaseMetadata& meta, const ImbalanceOptions& o,
                                ImbalanceReport& report) {
  std::optional<storage::MetricId> metric;
  for (std::size_t m = 0; m < meta.metrics.size(); ++m)
    if (o.metric.empty() ? m == 0 : meta.metrics[m].descriptor.name == o.metric)
      metric = static_cast<storage::MetricId>(m);
  if (!metric) throw std::invalid_argument(fmt::format("unknown metric '{}'", o.metric));
  const auto& stored = meta.metrics[*metric];
  // A derived metric (csp-prof-mpi --derive; its description says so) need not add up over the
  // calling context (a ratio does not), and own costs are differences of inclusive values.
  if (stored.valueType == storage::ValueType::Real && stored.descriptor.description.starts_with("derived per thread"))
    throw std::invalid_argument(
        fmt::format("metric '{}' is derived; the imbalance analysis needs a measured metric", stored.descriptor.name));
  report.metric = stored.descriptor.name;
  report.unit = stored.descriptor.unit;
  report.samplingError = costModel(stored).samplingError;
  return *metric;
}

void checkOptions(const ImbalanceOptions& o) {
  auto fraction = [](const char* name, double v) {
    if (!(v >= 0 && v <= 1)) throw std::invalid_argument(fmt::format("{} {}: expected a number from 0 to 1", name, v));
  };
  fraction("--cluster-threshold", o.clusterThreshold);
  fraction("--min-share", o.minShare);
  fraction("min context share", o.minContextShare);
  if (!(o.significance > 0 && o.significance < 1))
    throw std::invalid_argument(fmt::format("significance {}: expected a number between 0 and 1", o.significance));
  if (!(o.minImbalance >= 0 && std::isfinite(o.minImbalance)))
    throw std::invalid_argument(fmt::format("--min-imbalance {}: expected a number >= 0", o.minImbalance));
}

// The threads that are samples: by default the worker threads when there are several (the
// threads that share the parallel work; a process's first thread often runs serial parts the
// workers never see), else the views' default (the main threads of the ranks).
storage::ThreadSelection sampleThreads(const storage::DatabaseMetadata& meta, const ImbalanceOptions& o) {
  std::string threads = o.threads;
  if (threads.empty()) {
    std::size_t workers = 0;
    for (const auto& c : meta.threadClasses) workers += c.threadClass == storage::ThreadClass::Worker;
    if (workers >= 2) threads = "worker";
  }
  return storage::selectThreads(meta, threads);
}

struct Section {
  std::vector<storage::NodeId> roots;  // CCT subtrees that make up the section
  std::string regionName;              // non-empty: a region section
  std::string label;
};

Section resolveSection(const storage::Database& db, const Tree& tree, const std::string& spec) {
  Section s;
  const auto& meta = db.metadata();
  if (spec.rfind("region:", 0) == 0) {
    s.regionName = spec.substr(7);
    s.roots = {0};
    s.label = "region " + s.regionName;
  } else if (spec.empty()) {
    s.roots = {0};
    s.label = "<program root>";
  } else if (std::all_of(spec.begin(), spec.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const auto id = spec.size() > 10 ? std::uint64_t{UINT64_MAX} : std::stoull(spec);
    if (id >= tree.nodes.size()) throw std::invalid_argument(fmt::format("section {}: no such CCT node", spec));
    s.roots = {static_cast<storage::NodeId>(id)};
    s.label = tree.label(s.roots[0]);
  } else {
    std::vector<char> member(tree.nodes.size(), 0);
    for (std::size_t i = 0; i < tree.nodes.size(); ++i)
      if (tree.nodes[i].kind == ScopeKind::ProcFrame && meta.strings[tree.nodes[i].name] == spec) member[i] = 1;
    for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
      if (!member[i]) continue;
      bool outermost = true;
      for (auto p = tree.nodes[i].parent; p != kNoIndex && outermost; p = tree.nodes[p].parent) outermost = !member[p];
      if (outermost) s.roots.push_back(static_cast<storage::NodeId>(i));
    }
    if (s.roots.empty())
      throw std::invalid_argument(fmt::format("section '{}': no procedure of this name in the CCT", spec));
    s.label = s.roots.size() == 1 ? tree.label(s.roots[0]) : fmt::format("{} ({} contexts)", spec, s.roots.size());
  }
  return s;
}

// Each selected thread's time inside any instance of the region (nested instances counted once),
// from its enter and leave events; a visit still open at the end of the log is not counted.
std::map<storage::ProfileId, double> regionTimes(const storage::Database& db, const Section& section,
                                                 const std::function<bool(storage::ProfileId)>& selected,
                                                 ImbalanceReport& report) {
  const auto& meta = db.metadata();
  const auto regionNodes = db.regions();
  std::vector<char> inSection(regionNodes.size(), 0);
  bool any = false;
  for (std::size_t r = 1; r < regionNodes.size(); ++r)
    if (regionNodes[r].name < meta.strings.size() && meta.strings[regionNodes[r].name] == section.regionName)
      inSection[r] = 1, any = true;
  if (!any)
    throw std::invalid_argument(
        fmt::format("section region:{}: no region of this name in the database", section.regionName));
  std::vector<storage::RegionLogProcess> logs;
  if (db.hasRegionLogFamily()) logs = db.regionLogProcesses();
  if (logs.empty())
    throw std::invalid_argument(fmt::format(
        "section region:{}: the database has no region event logs, which give each thread's time in a region "
        "(measure with csp-run --region-log)",
        section.regionName));
  std::map<storage::ProfileId, double> times;
  std::size_t threadsWithLostEvents = 0;
  for (const auto& process : logs) {
    for (const auto& thread : process.threads) {
      if (thread.profile >= meta.profiles.size() || !selected(thread.profile)) continue;
      if (thread.eventsLost > 0) ++threadsWithLostEvents;
      auto cursor = db.regionLog(process.process, thread.profile);
      storage::RegionLogEvent e;
      std::uint64_t depth = 0, since = 0;
      double total = 0;
      while (cursor->next(e)) {
        if (e.region >= inSection.size() || !inSection[e.region]) continue;
        if (e.enter) {
          if (depth++ == 0) since = e.timeNs;
        } else if (depth > 0 && --depth == 0 && e.timeNs > since) {
          total += static_cast<double>(e.timeNs - since);
        }
      }
      if (total > 0) times[thread.profile] += total;
    }
  }
  if (threadsWithLostEvents > 0)
    report.notes.push_back(
        fmt::format("{} thread{} lost region events (a full log, csp-run --region-log-events): their "
                    "time in the region is a lower bound",
                    threadsWithLostEvents, threadsWithLostEvents == 1 ? "" : "s"));
  report.unit = "ns";
  report.sectionMeasure = "wall-clock time in the region (region event logs)";
  report.samplingError = 0;  // clock readings, not samples
  return times;
}

// The samples (threads with a section time) and their times T.
struct Threads {
  std::vector<storage::ProfileId> profiles;
  std::unordered_map<storage::ProfileId, Eigen::Index> row;
  VectorXd t;
  Eigen::Index n() const { return t.size(); }
};

Threads sampleTimes(const std::map<storage::ProfileId, double>& times) {
  Threads s;
  for (const auto& [p, v] : times)
    if (v > 0) s.profiles.push_back(p);
  s.t.resize(static_cast<Eigen::Index>(s.profiles.size()));
  for (std::size_t i = 0; i < s.profiles.size(); ++i) {
    s.row[s.profiles[i]] = static_cast<Eigen::Index>(i);
    s.t[static_cast<Eigen::Index>(i)] = times.at(s.profiles[i]);
  }
  return s;
}

void describeSection(const storage::DatabaseMetadata& meta, const Threads& s, ImbalanceReport& report) {
  const VectorXd& t = s.t;
  report.threads = static_cast<std::size_t>(s.n());
  report.sum = t.sum();
  report.mean = t.mean();
  report.max = t.maxCoeff();
  report.stddev = std::sqrt(covariance(t, t));
  report.imbalance = report.mean > 0 ? report.max / report.mean : std::numeric_limits<double>::quiet_NaN();
  std::vector<SlowThread> all;
  for (std::size_t i = 0; i < s.profiles.size(); ++i)
    all.push_back({s.profiles[i], formatIdTuple(meta.profiles[s.profiles[i]]), t[static_cast<Eigen::Index>(i)]});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.value > b.value || (a.value == b.value && a.profile < b.profile);
  });
  for (const auto& thread : all)
    if (thread.value > report.mean + report.stddev && report.slowest.size() < 10) report.slowest.push_back(thread);
}

// Stage 1: is there an imbalance worth explaining? The sampling-error rule is the views' (an
// imbalance that could be 1 once the max moves down and the mean up within their errors).
bool sectionNeedsExplaining(ImbalanceReport& report, const ImbalanceOptions& o) {
  const double e = report.samplingError;
  if (report.max - e <= report.mean + e) {
    report.verdict = ImbalanceVerdict::WithinSamplingError;
    report.verdictText = fmt::format(
        "max/mean {:.3f} is within sampling error: each thread's value is exact only to ±{} (one sampling period), "
        "so every thread could have taken the same time; nothing to explain",
        report.imbalance, metrics::formatQuantity(e, report.unit));
    return false;
  }
  if (report.imbalance < 1 + o.minImbalance) {
    report.verdict = ImbalanceVerdict::BelowThreshold;
    report.verdictText = fmt::format(
        "max/mean {:.3f} is below 1 + --min-imbalance ({:g}): balanced enough, nothing to explain "
        "(--min-imbalance 0 analyses it anyway)",
        report.imbalance, o.minImbalance);
    return false;
  }
  return true;
}

// Stage 2: the contexts inside the section that are large enough and vary over the threads.
struct Contexts {
  std::vector<storage::NodeId> nodes;
  std::vector<VectorXd> xs;                                // inclusive value per thread
  std::unordered_map<storage::NodeId, std::size_t> index;  // node -> position
};

Contexts sectionContexts(const storage::Database& db, const Tree& tree, const Section& section,
                         storage::MetricId metric, const CostModel& cost, const Threads& s,
                         const std::function<bool(storage::ProfileId)>& selected, const ImbalanceOptions& o,
                         ImbalanceReport& report) {
  const auto& meta = db.metadata();
  auto perThread = [&](storage::NodeId node) {
    VectorXd x = VectorXd::Zero(s.n());
    for (const auto& v : db.nodeValues(node, metric, storage::MetricScope::Inclusive)) {
      if (v.profile >= meta.profiles.size() || !selected(v.profile)) continue;
      const auto it = s.row.find(v.profile);
      if (it != s.row.end()) x[it->second] += cost.value(v.value);
    }
    return x;
  };
  std::vector<double> sumOf(tree.nodes.size(), 0);
  db.forEachSummary([&](storage::NodeId node, storage::MetricId m, storage::MetricScope scope, std::string_view value) {
    if (m != metric || scope != storage::MetricScope::Inclusive || node >= sumOf.size()) return;
    sumOf[node] = cost.summarySum(value);
  });
  double sectionSum = 0;
  for (auto r : section.roots) sectionSum += sumOf[r];
  std::vector<storage::NodeId> inSection;
  for (auto r : section.roots) {
    std::vector<storage::NodeId> stack(tree.children[r].begin(), tree.children[r].end());
    while (!stack.empty()) {
      const auto id = stack.back();
      stack.pop_back();
      inSection.push_back(id);
      for (auto c : tree.children[id]) stack.push_back(c);
    }
  }
  report.contextsInSection = inSection.size();
  std::sort(inSection.begin(), inSection.end(),
            [&](auto a, auto b) { return sumOf[a] != sumOf[b] ? sumOf[a] > sumOf[b] : a < b; });
  // The threads' whole time, against which the spine is recognized: T for a CCT section; for a
  // region, each thread's whole inclusive value (its CPU time is not its time in the region).
  const VectorXd all = section.regionName.empty() ? s.t : perThread(0);
  Contexts c;
  for (auto id : inSection) {
    if (c.nodes.size() >= o.maxContexts || sumOf[id] < o.minContextShare * sectionSum) break;
    VectorXd x = perThread(id);
    if (!(covariance(x, x) > 0)) continue;  // the same in every thread
    // The spine: a chain of frames and call sites that carries all of a thread's time wherever
    // it is present (or a thread's start, which only tells which threads are of which kind).
    const VectorXd whole = (x.array() > 0).select(all, 0.0);
    if ((whole - x).cwiseAbs().sum() <= 0.01 * all.sum()) continue;
    c.index[id] = c.nodes.size();
    c.nodes.push_back(id);
    c.xs.push_back(std::move(x));
  }
  report.contextsAnalysed = c.nodes.size();
  return c;
}

// Stage 3: own costs of the static scopes among the contexts.
struct Scopes {
  std::vector<std::size_t> context;                        // position in Contexts
  std::vector<VectorXd> own;                               // e_c
  std::vector<std::size_t> analysedChildren;               // nearest analysed static scopes below
  std::vector<std::size_t> parentScope;                    // nearest analysed static scope above (npos: none)
  VectorXd remainder;                                      // T minus the outermost scopes' inclusive costs
  std::unordered_map<storage::NodeId, std::size_t> index;  // node -> scope
};
constexpr std::size_t kNoScope = static_cast<std::size_t>(-1);

// The nearest ancestor of `node` that is an analysed static scope, below the section's roots.
std::size_t enclosingScope(const Tree& tree, const Scopes& scopes, const std::vector<char>& isRoot,
                           storage::NodeId node) {
  for (auto p = tree.nodes[node].parent; p != kNoIndex && !isRoot[p]; p = tree.nodes[p].parent) {
    const auto it = scopes.index.find(p);
    if (it != scopes.index.end()) return it->second;
  }
  return kNoScope;
}

Scopes ownCosts(const Tree& tree, const Section& section, const Contexts& c, const Threads& s) {
  Scopes scopes;
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    if (!isStaticScope(tree.nodes[c.nodes[i]].kind)) continue;
    scopes.index[c.nodes[i]] = scopes.context.size();
    scopes.context.push_back(i);
    scopes.own.push_back(c.xs[i]);
  }
  std::vector<char> isRoot(tree.nodes.size(), 0);
  for (auto r : section.roots) isRoot[r] = 1;
  scopes.analysedChildren.assign(scopes.context.size(), 0);
  scopes.parentScope.assign(scopes.context.size(), kNoScope);
  scopes.remainder = s.t;
  for (std::size_t k = 0; k < scopes.context.size(); ++k) {
    const auto& x = c.xs[scopes.context[k]];
    const auto parent = enclosingScope(tree, scopes, isRoot, c.nodes[scopes.context[k]]);
    scopes.parentScope[k] = parent;
    if (parent == kNoScope) {
      scopes.remainder -= x;
    } else {
      scopes.own[parent] -= x;
      ++scopes.analysedChildren[parent];
    }
  }
  return scopes;
}

// Beyond its sampling error: the spread of a scope's own cost over the threads exceeds what one
// period of error in its own value and in each analysed child's could make.
bool beyondSamplingError(const Scopes& scopes, std::size_t k, double error) {
  const auto& e = scopes.own[k];
  return e.maxCoeff() - e.minCoeff() > 2 * error * static_cast<double>(1 + scopes.analysedChildren[k]);
}

// Stage 5: the causes. A scope is a cause when its own cost explains at least minShare of the
// variance of T (share = cov(e, T) / var(T)) and its per-thread differences are more than
// sampling produces. The second is the dispersion test of its own sample counts: were every
// thread's rate in the scope the same, a scope that holds a fraction f of a thread's samples
// would get a binomial count of variance N f (1 - f) <= its mean, so D = sum (c_t - mean)^2 / mean
// is at most chi-square with threads - 1 degrees of freedom; its p-value is Bonferroni-corrected
// for the number of scopes tested. (Not chosen by correlation: a tiny cost that happens to follow
// T, such as which rank read the hardware topology, correlates as well as the loop that makes the
// difference, but explains next to nothing. Nor by a regression on T, of which the scopes' own
// costs are the parts: that T varies with its parts is no evidence.) Counted metrics are exact:
// any difference is real.
struct Selection {
  std::vector<std::size_t> chosen;  // scopes, by share
  std::vector<double> pValues;      // of each one's dispersion test, corrected
  std::size_t proposed = 0;         // scopes with minShare beyond their worst-case sampling error
  double modelP = 1;                // smallest corrected p-value of the proposed scopes
  std::size_t tested = 0;
  VectorXd beta;  // standardized coefficients of T regressed on the causes
  double r2 = 0;
};

// The corrected p-value of the hypothesis that the scope's own samples are spread over the
// threads as sampling alone would spread them.
double dispersionPValue(const VectorXd& own, double period, bool sampled, std::size_t tested) {
  if (!sampled) return 0;  // exact counts
  const VectorXd counts = own / std::max(period, 1.0);
  const double mean = counts.mean();
  if (!(mean > 0)) return 1;
  const double d = (counts.array() - mean).square().sum() / mean;
  const double df = static_cast<double>(counts.size() - 1);
  return std::min(1.0, chiSquarePValue(d, df) * static_cast<double>(tested));
}

Selection chooseCauses(const Scopes& scopes, const VectorXd& t, const ImbalanceOptions& o, const CostModel& cost) {
  Selection sel;
  const double varT = covariance(t, t);
  std::vector<std::pair<double, std::size_t>> proposed;  // (share, scope)
  for (std::size_t k = 0; k < scopes.own.size(); ++k) {
    if (!(covariance(scopes.own[k], scopes.own[k]) > 0)) continue;
    ++sel.tested;
    const double share = covariance(scopes.own[k], t) / varT;
    if (share >= o.minShare && beyondSamplingError(scopes, k, cost.samplingError)) proposed.push_back({share, k});
  }
  std::sort(proposed.begin(), proposed.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  sel.proposed = proposed.size();
  for (const auto& [share, k] : proposed) {
    const double p = dispersionPValue(scopes.own[k], cost.period, cost.sampled, sel.tested);
    sel.modelP = std::min(sel.modelP, p);
    if (!(p < o.significance)) continue;
    sel.chosen.push_back(k);
    sel.pValues.push_back(p);
  }
  if (sel.chosen.empty()) return sel;
  const Eigen::Index n = t.size();
  const VectorXd ys = standardized(t);
  MatrixXd x(n, static_cast<Eigen::Index>(sel.chosen.size()));
  for (std::size_t i = 0; i < sel.chosen.size(); ++i)
    x.col(static_cast<Eigen::Index>(i)) = standardized(scopes.own[sel.chosen[i]]);
  sel.beta = x.colPivHouseholderQr().solve(ys);
  sel.r2 = std::clamp(1 - (ys - x * sel.beta).squaredNorm() / ys.squaredNorm(), 0.0, 1.0);
  return sel;
}

// Stage 6: the causes, with their sites, entries, focus and threads.
struct Shares {
  std::vector<double> own;        // per scope, scaled so that positive parts add up to at most 1
  std::vector<double> inclusive;  // per context, cov(x, T) / var(T), unscaled
};

Shares explainedShares(const Scopes& scopes, const Contexts& c, const VectorXd& t) {
  Shares sh;
  const double varT = covariance(t, t);
  double positive = std::max(0.0, covariance(scopes.remainder, t) / varT);
  for (const auto& e : scopes.own) {
    sh.own.push_back(covariance(e, t) / varT);
    positive += std::max(0.0, sh.own.back());
  }
  // Scopes whose cost falls where T rises (a thread that computes less waits longer) make the
  // positive parts add up to more than 1: scaled down so that no share exceeds the whole.
  const double scale = std::max(1.0, positive);
  for (auto& v : sh.own) v /= scale;
  for (const auto& x : c.xs) sh.inclusive.push_back(covariance(x, t) / varT);
  return sh;
}

ImbalanceCause describeCause(const storage::DatabaseMetadata& meta, const Tree& tree, const Contexts& c,
                             const Scopes& scopes, const Shares& shares, const Threads& s, std::size_t k) {
  ImbalanceCause cause;
  const auto node = c.nodes[scopes.context[k]];
  cause.context = node;
  cause.label = tree.label(node);
  cause.path = tree.path(node);
  cause.share = shares.own[k];
  cause.correlation = correlation(scopes.own[k], s.t);
  cause.mean = scopes.own[k].mean();
  cause.max = scopes.own[k].maxCoeff();
  // Focus: its own line that explains most.
  cause.focus = node;
  cause.focusLabel = cause.label;
  double best = 0;
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    if (tree.nodes[c.nodes[i]].kind != ScopeKind::Stmt || shares.inclusive[i] <= best) continue;
    storage::NodeId p = tree.nodes[c.nodes[i]].parent;
    while (p != kNoIndex && p != node && !scopes.index.count(p)) p = tree.nodes[p].parent;
    if (p != node) continue;
    best = shares.inclusive[i];
    cause.focus = c.nodes[i];
    cause.focusLabel = tree.label(c.nodes[i]);
  }
  std::vector<SlowThread> where;
  for (std::size_t i = 0; i < s.profiles.size(); ++i)
    where.push_back(
        {s.profiles[i], formatIdTuple(meta.profiles[s.profiles[i]]), scopes.own[k][static_cast<Eigen::Index>(i)]});
  std::sort(where.begin(), where.end(), [](const auto& a, const auto& b) {
    return a.value > b.value || (a.value == b.value && a.profile < b.profile);
  });
  where.resize(std::min<std::size_t>(where.size(), 5));
  cause.threads = std::move(where);
  return cause;
}

// Where a cause enters the tree: up from its scope while the context above is essentially the
// cause -- it costs at most a quarter more and carries no more of the imbalance (within
// minShare) -- holds no other cause, and is inside the section and analysed (not the spine).
// Typically the call of the procedure that holds the loop: above it, the caller's other work.
void findEntry(const Tree& tree, const Contexts& c, const Shares& shares, const std::vector<storage::NodeId>& others,
               const ImbalanceOptions& o, ImbalanceCause& cause) {
  const auto self = c.index.at(cause.context);
  const double base = shares.inclusive[self], cost = c.xs[self].mean();
  cause.entry = cause.context;
  for (auto a = tree.nodes[cause.context].parent; a != kNoIndex; a = tree.nodes[a].parent) {
    const auto it = c.index.find(a);
    if (it == c.index.end() || shares.inclusive[it->second] > base + o.minShare ||
        c.xs[it->second].mean() > 1.25 * cost)
      break;
    if (std::any_of(others.begin(), others.end(), [&](auto other) { return other == a || tree.isAncestor(a, other); }))
      break;
    cause.entry = a;
  }
  cause.entryLabel = tree.label(cause.entry);
}

std::vector<ImbalanceCause> rankCauses(const storage::DatabaseMetadata& meta, const Tree& tree, const Contexts& c,
                                       const Scopes& scopes, const Selection& sel, const Threads& s,
                                       const ImbalanceOptions& o) {
  const Shares shares = explainedShares(scopes, c, s.t);
  std::vector<ImbalanceCause> causes;
  std::vector<std::size_t> leaders;  // scope of each cause
  for (std::size_t i = 0; i < sel.chosen.size(); ++i) {
    const auto k = sel.chosen[i];
    // A scope whose own cost varies like a higher-ranked cause's is another site of that cause
    // (the same data drives both).
    std::size_t same = causes.size();
    double best = o.clusterThreshold;
    for (std::size_t q = 0; q < causes.size(); ++q) {
      const double r = correlation(scopes.own[k], scopes.own[leaders[q]]);
      if (r >= best) best = r, same = q;
    }
    if (same < causes.size()) {
      const auto node = c.nodes[scopes.context[k]];
      causes[same].sites.push_back({node, tree.label(node), tree.path(node), shares.own[k], best});
      causes[same].share += shares.own[k];
      continue;
    }
    auto cause = describeCause(meta, tree, c, scopes, shares, s, k);
    cause.pValue = sel.pValues[i];
    cause.beta = sel.beta[static_cast<Eigen::Index>(i)];
    causes.push_back(std::move(cause));
    leaders.push_back(k);
  }
  std::sort(causes.begin(), causes.end(), [](const auto& a, const auto& b) {
    return a.share != b.share ? a.share > b.share : a.context < b.context;
  });
  for (auto& cause : causes) {
    std::vector<storage::NodeId> others;
    for (const auto& other : causes) {
      if (&other == &cause) continue;
      others.push_back(other.context);
      for (const auto& site : other.sites) others.push_back(site.context);
    }
    for (const auto& site : cause.sites) others.push_back(site.context);
    findEntry(tree, c, shares, others, o, cause);
  }
  return causes;
}

void concludeVerdict(ImbalanceReport& report, const Selection& sel, const ImbalanceOptions& o) {
  if (report.scopesTested == 0) {
    report.verdict = ImbalanceVerdict::NothingToAnalyse;
    report.verdictText = "no procedure, loop or inlined code inside the section varies over the threads";
  } else if (sel.proposed == 0) {
    report.verdict = ImbalanceVerdict::NoCauseAboveShare;
    report.verdictText = fmt::format(
        "no procedure, loop or inlined code explains at least {:g} % of the differences by its own cost beyond its "
        "sampling error ({} tested); nothing is listed",
        100 * o.minShare, report.scopesTested);
  } else if (report.causes.empty()) {
    report.verdict = ImbalanceVerdict::NotSignificant;
    report.verdictText = fmt::format(
        "the per-thread differences of the {} largest contributors are within what sampling produces (dispersion "
        "test of their sample counts, p = {:.3g} after correcting for the {} scopes tested); nothing is listed",
        sel.proposed, report.modelPValue, report.scopesTested);
  } else {
    double total = 0;
    for (const auto& c : report.causes) total += c.share;
    report.verdict = ImbalanceVerdict::Explained;
    report.verdictText = fmt::format("{} cause{} explain{} {:.0f} % of the imbalance (R² {:.2f}, model p = {:.3g})",
                                     report.causes.size(), report.causes.size() == 1 ? "" : "s",
                                     report.causes.size() == 1 ? "s" : "", 100 * total, report.r2, report.modelPValue);
  }
}

}  // namespace

const char* toString(ImbalanceVerdict verdict) {
  switch (verdict) {
    case ImbalanceVerdict::Explained:
      return "explained";
    case ImbalanceVerdict::WithinSamplingError:
      return "within-sampling-error";
    case ImbalanceVerdict::BelowThreshold:
      return "below-threshold";
    case ImbalanceVerdict::NotSignificant:
      return "not-significant";
    case ImbalanceVerdict::NoCauseAboveShare:
      return "no-cause-above-share";
    case ImbalanceVerdict::NothingToAnalyse:
      return "nothing-to-analyse";
  }
  return "?";
}

double chiSquarePValue(double x, double df) { return upperIncompleteGamma(df / 2, x / 2); }

double fTestPValue(double f, double d1, double d2) {
  if (!(f > 0)) return 1;
  if (std::isinf(f)) return 0;
  return incompleteBeta(d2 / 2, d1 / 2, d2 / (d2 + d1 * f));
}

ImbalanceReport analyzeImbalance(const storage::Database& db, const ImbalanceOptions& o) {
  checkOptions(o);
  const auto& meta = db.metadata();
  ImbalanceReport report;
  const auto metric = resolveMetric(meta, o, report);
  const CostModel cost = costModel(meta.metrics[metric]);
  const auto selection = sampleThreads(meta, o);
  report.threadsLabel = selection.label;
  const std::function<bool(storage::ProfileId)> selected = [&](storage::ProfileId p) {
    return selection.all || selection.covers(meta.threadClasses.at(p).threadClass);
  };

  Tree tree;
  tree.nodes = db.readCct();
  tree.strings = &meta.strings;
  tree.children.resize(tree.nodes.size());
  for (std::size_t i = 1; i < tree.nodes.size(); ++i)
    tree.children[tree.nodes[i].parent].push_back(static_cast<storage::NodeId>(i));
  const Section section = resolveSection(db, tree, o.section);
  report.section = section.label;

  std::map<storage::ProfileId, double> times;
  if (!section.regionName.empty()) {
    times = regionTimes(db, section, selected, report);
  } else {
    for (auto r : section.roots)
      for (const auto& v : db.nodeValues(r, metric, storage::MetricScope::Inclusive))
        if (v.profile < meta.profiles.size() && selected(v.profile)) times[v.profile] += cost.value(v.value);
  }
  const Threads s = sampleTimes(times);
  if (s.n() == 0)
    throw std::invalid_argument(
        fmt::format("section {}: no thread of the selection ({}) has a value there", report.section, selection.label));
  describeSection(meta, s, report);
  if (!sectionNeedsExplaining(report, o)) return report;

  const Contexts contexts = sectionContexts(db, tree, section, metric, cost, s, selected, o, report);
  const Scopes scopes = ownCosts(tree, section, contexts, s);
  const Selection sel = chooseCauses(scopes, s.t, o, cost);
  report.scopesTested = sel.tested;
  report.modelPValue = sel.modelP;
  report.r2 = sel.r2;
  if (!sel.chosen.empty()) report.causes = rankCauses(meta, tree, contexts, scopes, sel, s, o);
  concludeVerdict(report, sel, o);
  return report;
}

}  // namespace csp::analysis
