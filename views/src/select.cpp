// From a view model to what is shown: finalize, filter, prune, sort. Only nodes that are shown
// (and their siblings, to decide which are) are ever built by the lazy models.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "csp/metrics/expression.hpp"
#include "csp/metrics/scaling.hpp"
#include "model.hpp"

namespace csp::views {

namespace {

using detail::MetricSet;
using detail::ModelNode;
using detail::ViewModel;

class Selector {
 public:
  Selector(ViewModel& model, const ViewRequest& request, const MetricSet& metrics, std::uint64_t profiles,
           ViewTree& tree, std::optional<std::uint32_t> start)
      : model_(model), request_(request), metrics_(metrics), profiles_(profiles), tree_(tree), start_(start) {
    for (const auto& c : tree_.columns) {
      if (!c.formula.empty()) {
        // A formula: the slots of its references at the column's scope.
        auto f = metrics::SummaryFormula::parse(c.formula);
        std::vector<std::size_t> refs;
        for (const auto& r : f.references()) refs.push_back(MetricSet::slot(metricIndex(r.metric), c.scope));
        formulas_.push_back(Formula{std::move(f), std::move(refs)});
        slots_.push_back(formulas_.back()->slots.empty() ? 0 : formulas_.back()->slots.front());
        tree_.units.push_back("");
        continue;
      }
      formulas_.push_back(std::nullopt);
      const auto m = metricIndex(c.metric);
      slots_.push_back(MetricSet::slot(m, c.scope));
      tree_.units.push_back(metrics_.units[m]);
    }
    sortColumn_ = 0;
    if (request_.sortBy) {
      const auto it = std::find(tree_.columns.begin(), tree_.columns.end(), *request_.sortBy);
      sortColumn_ = static_cast<std::size_t>(it - tree_.columns.begin());
    }
    // Shares (threshold, hot path) are measured on the sort column's metric, inclusive (exclusive
    // for metrics that have no inclusive values).
    // A formula column has no metric of its own: the first plain column's metric, else the
    // formula's first reference.
    std::size_t shareColumn = sortColumn_;
    if (formulas_[shareColumn])
      for (std::size_t c = 0; c < tree_.columns.size(); ++c)
        if (!formulas_[c]) {
          shareColumn = c;
          break;
        }
    const auto primaryMetric =
        formulas_[shareColumn] ? slots_[shareColumn] / 2 : metricIndex(tree_.columns[shareColumn].metric);
    primary_ = MetricSet::slot(primaryMetric, metrics_.shareScope(primaryMetric));
    // A region's own visits or concurrency say nothing about its subregions: no pruning by them.
    unprunable_ = tree_.kind == ViewKind::Regions && primaryMetric < metrics_.exclusiveOnly.size() &&
                  metrics_.exclusiveOnly[primaryMetric];
  }

  void run() {
    const auto root = model_.root();
    const ModelNode& r = model_.node(root);
    // Percent bases: the root's inclusive total of each column's metric. A region tree's root is
    // no region and carries nothing: then the top-level regions' total.
    for (std::size_t c = 0; c < tree_.columns.size(); ++c) {
      if (formulas_[c]) {
        tree_.rootSum.push_back(NAN);
        tree_.rootMean.push_back(NAN);
        continue;
      }
      const auto m = metricIndex(tree_.columns[c].metric);
      const auto inclusive = MetricSet::slot(m, metrics_.shareScope(m));
      auto s = r.acc[inclusive].finalize(profiles_, metrics::Population::All);
      double sum = s.sum;
      if (!(sum > 0) && tree_.kind == ViewKind::Regions) {
        // The top-level regions' total; for a metric without inclusive values (visits, the
        // per-process concurrency metrics) every region's own value, which is what adds up.
        sum = 0;
        const bool own = m < metrics_.exclusiveOnly.size() && metrics_.exclusiveOnly[m];
        std::vector<std::uint32_t> stack = model_.children(root);
        while (!stack.empty()) {
          const auto k = stack.back();
          stack.pop_back();
          sum += model_.node(k).acc[inclusive].finalize(profiles_, metrics::Population::All).sum;
          if (own)
            for (auto c : model_.children(k)) stack.push_back(c);
        }
      }
      tree_.rootSum.push_back(sum);
      tree_.rootMean.push_back(profiles_ ? sum / static_cast<double>(profiles_) : NAN);
    }
    primarySum_ = tree_.rootSum[sortColumn_];
    primaryMean_ = tree_.rootMean[sortColumn_];

    std::vector<std::uint32_t> tops;
    if (start_) {
      tops = {*start_};
    } else if (!request_.focus.empty()) {
      tops = focusNodes();
    } else if (request_.top) {
      // The root, then the N hottest procedures directly below it.
      const auto rootIndex = emit(root, kNoIndex, 0);
      tree_.roots.push_back(rootIndex);
      auto procs = candidates(model_.procedures(), false);
      const auto skip = std::min(procs.size(), request_.topOffset);
      procs.erase(procs.begin(), procs.begin() + static_cast<std::ptrdiff_t>(skip));
      tree_.pruned.beyondTop += skip;
      if (procs.size() > *request_.top) {
        tree_.pruned.beyondTop += procs.size() - *request_.top;
        procs.resize(*request_.top);
      }
      for (const auto& p : procs) expand(p, rootIndex, 1);
      return;
    } else {
      tops = {root};
    }
    for (auto h : tops) {
      const auto index = emit(h, kNoIndex, 0);
      tree_.roots.push_back(index);
      descend(h, index, 0, false);
    }
  }

 private:
  struct Candidate {
    std::uint32_t handle;
    double sortValue;
    double share;  // of the root, percent
    bool imbalanceOnly;
    double maxShare;
    bool inKept;
  };

  std::size_t metricIndex(const std::string& name) const {
    for (std::size_t m = 0; m < metrics_.names.size(); ++m)
      if (metrics_.names[m] == name) return m;
    throw ViewError(fmt::format("unknown metric '{}'", name));
  }

  std::vector<std::uint32_t> focusNodes() {
    const auto& f = request_.focus;
    std::vector<std::uint32_t> out;
    if (!f.empty() && std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      auto h = model_.byId(std::stoull(f));
      if (!h)
        throw ViewError(fmt::format("--focus {}: no node with this id in the {} view{}", f, toString(tree_.kind),
                                    tree_.kind == ViewKind::Callers ? " (callers: procedure ids only)" : ""));
      out.push_back(*h);
    } else {
      out = model_.find(f, true);
      if (out.empty()) out = model_.find(f, false);
      if (out.empty())
        throw ViewError(fmt::format("--focus {}: no node of this name in the {} view", f, toString(tree_.kind)));
    }
    return out;
  }

  double value(const metrics::Statistics& s, Statistic stat) const { return metrics::valueOf(s, stat); }

  // Column c's value at a node: a statistic, or a formula over statistics of the same scope.
  double columnValue(const ModelNode& n, std::size_t c, const Column& col) const {
    if (!formulas_[c]) return value(n.acc[slots_[c]].finalize(profiles_, request_.population), col.statistic);
    const auto& f = *formulas_[c];
    std::vector<double> args;
    for (std::size_t i = 0; i < f.slots.size(); ++i) {
      const auto& ref = f.formula.references()[i];
      args.push_back(value(n.acc[f.slots[i]].finalize(profiles_, ref.population), ref.statistic));
    }
    return f.formula.evaluate(args);
  }

  bool matchesAny(const std::string& label, const std::vector<std::string>& patterns) const {
    return std::any_of(patterns.begin(), patterns.end(), [&](const auto& p) { return detail::nameMatches(label, p); });
  }

  // Filters and orders children; `inKept`: an ancestor matched --keep.
  std::vector<Candidate> candidates(const std::vector<std::uint32_t>& handles, bool inKept) {
    std::vector<Candidate> out;
    for (auto h : handles) {
      const ModelNode& n = model_.node(h);
      const std::string label = detail::matchLabel(n);
      if (!request_.hide.empty() && matchesAny(label, request_.hide)) {
        ++tree_.pruned.hidden;
        continue;
      }
      bool kept = inKept;
      if (!request_.keep.empty() && !kept) {
        kept = matchesAny(label, request_.keep);
        if (!kept && !std::any_of(request_.keep.begin(), request_.keep.end(),
                                  [&](const auto& p) { return model_.subtreeMatches(h, p); })) {
          ++tree_.pruned.hidden;
          continue;
        }
      }
      const auto p = n.acc[primary_].finalize(profiles_, metrics::Population::All);
      // Shares by size: with a total below zero (a scaling loss where other contexts gained) the
      // largest contributors either way are the ones to show.
      const double base = std::fabs(primarySum_), meanBase = std::fabs(primaryMean_);
      const double share = base > 0 ? 100.0 * std::fabs(p.sum) / base : 0;
      const double maxShare = meanBase > 0 ? 100.0 * std::max(std::fabs(p.max), std::fabs(p.min)) / meanBase : 0;
      bool imbalanceOnly = false;
      if (request_.thresholdPercent > 0 && share < request_.thresholdPercent && !unprunable_) {
        if (maxShare >= request_.thresholdPercent) {
          imbalanceOnly = true;
        } else {
          ++tree_.pruned.belowThreshold;
          continue;
        }
      }
      const auto& col = tree_.columns[sortColumn_];
      out.push_back({h, columnValue(n, sortColumn_, col), share, imbalanceOnly, maxShare, kept});
    }
    std::stable_sort(out.begin(), out.end(), [&](const Candidate& a, const Candidate& b) {
      if (!request_.sortByName) {
        const bool an = std::isnan(a.sortValue), bn = std::isnan(b.sortValue);
        if (an != bn) return bn;
        // By size: the largest losses and the largest gains of a scaling loss before the small.
        if (!an && std::fabs(a.sortValue) != std::fabs(b.sortValue))
          return std::fabs(a.sortValue) > std::fabs(b.sortValue);
        if (!an && a.sortValue != b.sortValue) return a.sortValue > b.sortValue;
      }
      return detail::matchLabel(model_.node(a.handle)) < detail::matchLabel(model_.node(b.handle));
    });
    return out;
  }

  std::uint32_t emit(std::uint32_t h, std::uint32_t parent, unsigned depth) {
    const ModelNode& n = model_.node(h);
    TreeNode t;
    t.parent = parent;
    t.depth = depth;
    t.kind = n.kind;
    t.name = n.name;
    t.file = n.file;
    t.line = n.line;
    t.module = n.module;
    t.cctNode = n.cctNode;
    t.viewId = n.viewId;
    if (n.kind == NodeKind::Root) t.name = tree_.kind == ViewKind::Regions ? "<all regions>" : "<program root>";
    for (std::size_t c = 0; c < tree_.columns.size(); ++c) {
      const auto& acc = n.acc[slots_[c]];
      const auto s = formulas_[c] ? metrics::Statistics{} : acc.finalize(profiles_, request_.population);
      t.values.push_back(formulas_[c] ? columnValue(n, c, tree_.columns[c]) : value(s, tree_.columns[c].statistic));
      t.instances.push_back(acc.instances());
      t.stats.push_back(s);
      const std::size_t metric = slots_[c] / 2;
      const double e = formulas_[c] || metric >= metrics_.perThreadError.size() ? NAN : metrics_.perThreadError[metric];
      t.errors.push_back(formulas_[c] ? NAN : metrics::statisticError(s, tree_.columns[c].statistic, e));
      t.withinSamplingError.push_back(!formulas_[c] && metrics::withinSamplingError(s, tree_.columns[c].statistic, e));
    }
    const auto index = static_cast<std::uint32_t>(tree_.nodes.size());
    tree_.nodes.push_back(std::move(t));
    if (parent != kNoIndex) tree_.nodes[parent].children.push_back(index);
    return index;
  }

  void expand(const Candidate& c, std::uint32_t parent, unsigned depth) {
    const auto index = emit(c.handle, parent, depth);
    tree_.nodes[index].imbalanceOnly = c.imbalanceOnly;
    if (c.imbalanceOnly) ++tree_.pruned.keptForImbalance;
    tree_.nodes[index].maxThreadPercent = c.maxShare;
    descend(c.handle, index, depth, c.inKept);
  }

  void descend(std::uint32_t h, std::uint32_t index, unsigned depth, bool inKept) {
    if (request_.depth && depth >= *request_.depth) {
      if (model_.hasChildren(h)) {
        tree_.nodes[index].truncated = true;
        ++tree_.pruned.beyondDepth;
      }
      return;
    }
    if (!inKept && !request_.keep.empty()) inKept = matchesAny(detail::matchLabel(model_.node(h)), request_.keep);
    const auto before = tree_.pruned;
    auto kids = candidates(model_.children(h), inKept);
    if (tree_.pruned.belowThreshold != before.belowThreshold || tree_.pruned.hidden != before.hidden)
      tree_.nodes[index].truncated = true;
    if (request_.hotPathPercent) {
      // Follow the hottest child while it holds enough of this node.
      const auto here = model_.node(h).acc[primary_].finalize(profiles_, metrics::Population::All).sum;
      std::size_t best = kids.size();
      double bestSum = -1;
      for (std::size_t i = 0; i < kids.size(); ++i) {
        const auto s = model_.node(kids[i].handle).acc[primary_].finalize(profiles_, metrics::Population::All).sum;
        if (s > bestSum) bestSum = s, best = i;
      }
      const bool follow = best < kids.size() && here > 0 && 100.0 * bestSum / here >= *request_.hotPathPercent;
      tree_.pruned.offHotPath += follow ? kids.size() - 1 : kids.size();
      if (!kids.empty()) tree_.nodes[index].truncated = true;
      if (!follow) return;
      kids = {kids[best]};
    }
    for (const auto& k : kids) expand(k, index, depth + 1);
  }

  ViewModel& model_;
  const ViewRequest& request_;
  const MetricSet& metrics_;
  std::uint64_t profiles_;
  ViewTree& tree_;
  std::vector<std::size_t> slots_;
  struct Formula {
    metrics::SummaryFormula formula;
    std::vector<std::size_t> slots;  // per reference
  };
  std::vector<std::optional<Formula>> formulas_;  // per column
  std::size_t sortColumn_ = 0;
  std::size_t primary_ = 1;
  bool unprunable_ = false;
  double primarySum_ = 0, primaryMean_ = 0;
  std::optional<std::uint32_t> start_;  // a node to show with its children instead of the view's top
};

}  // namespace

ThreadSelection selectThreads(const storage::Database& db, const std::string& threads) {
  try {
    return storage::selectThreads(db.metadata(), threads);
  } catch (const std::invalid_argument& e) {
    throw ViewError(e.what());
  }
}

namespace {

bool wantsHistogram(const std::vector<Column>& columns) {
  auto percentileLike = [](Statistic s) { return metrics::isPercentile(s) || s == Statistic::ImbalanceMedian; };
  for (const auto& c : columns) {
    if (c.formula.empty()) {
      if (percentileLike(c.statistic)) return true;
      continue;
    }
    const auto formula = metrics::SummaryFormula::parse(c.formula);
    const auto& refs = formula.references();
    if (std::any_of(refs.begin(), refs.end(),
                    [&](const metrics::StatisticRef& r) { return percentileLike(r.statistic); }))
      return true;
  }
  return false;
}

// What the metric set reads beside the metrics themselves: which threads, and histograms.
void configure(const storage::Database& db, const ThreadSelection& threads, const std::vector<Column>& columns,
               detail::MetricSet& metrics) {
  metrics.periods.clear();
  for (std::size_t m = 0; m < metrics.ids.size(); ++m)
    metrics.periods.push_back(
        static_cast<double>(std::max<std::uint64_t>(db.metrics()[metrics.ids[m]].descriptor.period, 1)));
  metrics.perThreadError.clear();
  for (std::size_t m = 0; m < metrics.ids.size(); ++m) {
    const auto& stored = db.metrics()[metrics.ids[m]];
    metrics.perThreadError.push_back(stored.valueType == storage::ValueType::Real    ? NAN
                                     : stored.descriptor.kind == MetricKind::Counted ? 0.0
                                                                                     : metrics.periods[m] - 1);
  }
  metrics.byClass = !threads.all;
  std::copy(std::begin(threads.classes), std::end(threads.classes), std::begin(metrics.classes));
  metrics.histograms = db.hasDistributions() && wantsHistogram(columns);
}

}  // namespace

namespace detail {

PreparedView prepareView(const storage::Database& db, const ViewRequest& request) {
  PreparedView p;
  ViewTree& tree = p.tree;
  tree.kind = request.kind;
  tree.columns = request.columns;
  tree.threads = request.kind == ViewKind::Regions ? selectThreads(db, "all") : selectThreads(db, request.threads);
  if (request.kind == ViewKind::Regions && !request.threads.empty() && request.threads != "all")
    throw ViewError(
        "--threads applies to the calling context, callers and flat views (region statistics are over all threads)");
  tree.profiles = tree.threads.profiles;
  if (request.top && request.kind != ViewKind::Flat && request.kind != ViewKind::Callers)
    throw ViewError("--top applies to the flat and callers views only");
  if (request.top && !request.focus.empty()) throw ViewError("--top and --focus cannot be combined");
  if (request.top && request.hotPathPercent) throw ViewError("--top and --hot-path cannot be combined");
  if (request.thresholdPercent < 0 || request.thresholdPercent > 100)
    throw ViewError("--threshold must be between 0 and 100");
  if (request.hotPathPercent && (*request.hotPathPercent <= 0 || *request.hotPathPercent > 100))
    throw ViewError("--hot-path must be above 0 and at most 100");

  MetricSet& metrics = p.metrics;
  metrics = request.kind == ViewKind::Regions ? detail::regionMetrics(db, tree.columns)
                                              : detail::resolveMetrics(db, tree.columns);
  ViewRequest& effective = p.request;
  effective = request;
  if (request.kind == ViewKind::Regions) {
    // A region metric stored without inclusive values (visits, the per-process concurrency
    // metrics) is shown and sorted by its exclusive values: an inclusive column would be zeros.
    auto exclusiveOnly = [&](const Column& c) {
      for (std::size_t m = 0; m < metrics.names.size(); ++m)
        if (metrics.names[m] == c.metric) return m < metrics.exclusiveOnly.size() && metrics.exclusiveOnly[m];
      return false;
    };
    std::vector<Column> columns;
    for (auto c : tree.columns) {
      if (exclusiveOnly(c)) c.scope = storage::MetricScope::Exclusive;
      if (std::find(columns.begin(), columns.end(), c) == columns.end()) columns.push_back(c);
    }
    tree.columns = std::move(columns);
    if (effective.sortBy && exclusiveOnly(*effective.sortBy)) effective.sortBy->scope = storage::MetricScope::Exclusive;
  }
  if (effective.sortBy &&
      std::find(tree.columns.begin(), tree.columns.end(), *effective.sortBy) == tree.columns.end()) {
    tree.columns.push_back(*effective.sortBy);
    if (request.kind != ViewKind::Regions) metrics = detail::resolveMetrics(db, tree.columns);
  }
  effective.columns = tree.columns;
  if (request.kind != ViewKind::Regions) configure(db, tree.threads, tree.columns, metrics);
  return p;
}

std::unique_ptr<ViewModel> makeModel(const storage::Database& db, ViewKind kind, const MetricSet& metrics) {
  switch (kind) {
    case ViewKind::CallingContext:
      return makeCallingContext(db, metrics);
    case ViewKind::Flat:
      return makeFlat(db, metrics);
    case ViewKind::Callers:
      return makeCallers(db, metrics);
    case ViewKind::Regions:
      return makeRegions(db, metrics);
  }
  throw std::logic_error("unknown view kind");
}

void selectView(ViewModel& model, PreparedView& prepared, std::optional<std::uint32_t> start) {
  Selector(model, prepared.request, prepared.metrics, prepared.tree.profiles, prepared.tree, start).run();
}

}  // namespace detail

ViewTree buildView(const storage::Database& db, const ViewRequest& request) {
  auto prepared = detail::prepareView(db, request);
  const auto model = detail::makeModel(db, request.kind, prepared.metrics);
  detail::selectView(*model, prepared);
  return std::move(prepared.tree);
}

}  // namespace csp::views
